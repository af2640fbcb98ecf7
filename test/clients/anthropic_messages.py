"""The anthropic Python SDK against a gateway session, unchanged: messages.create with a tool, the
tool_result turn (the whole history sent back), then the same loop streamed with the SDK's
messages.stream helper, and count_tokens. Prints one JSON line per call: what the client saw.
Env: ANVIL_ANTHROPIC_BASE_URL (the session's base URL without /v1), ANVIL_API_KEY, ANVIL_MODEL."""
import json
import os

import anthropic

client = anthropic.Anthropic(base_url=os.environ["ANVIL_ANTHROPIC_BASE_URL"], api_key=os.environ["ANVIL_API_KEY"], max_retries=0)
model = os.environ.get("ANVIL_MODEL", "anvil-tiny")
tools = [{"name": "add", "description": "a + b",
          "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}]


def show(step, message, **extra):
    print(json.dumps({"step": step, "stop_reason": message.stop_reason,
                      "content": [b.model_dump(exclude_none=True) for b in message.content], **extra}), flush=True)


messages = [{"role": "user", "content": "What is 12+7?"}]
first = client.messages.create(model=model, max_tokens=256, system="Use the tools.", tools=tools, messages=messages)
show("create", first)
use = next(b for b in first.content if b.type == "tool_use")
messages += [
    {"role": "assistant", "content": first.content},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": str(use.input["a"] + use.input["b"])}]},
]
second = client.messages.create(model=model, max_tokens=256, system="Use the tools.", tools=tools, messages=messages)
show("tool result", second)

with client.messages.stream(model=model, max_tokens=256, tools=tools, messages=[{"role": "user", "content": "What is 12+7?"}]) as stream:
    text = "".join(stream.text_stream)
    streamed = stream.get_final_message()
show("stream", streamed, text=text)
use = next(b for b in streamed.content if b.type == "tool_use")
history = [
    {"role": "user", "content": "What is 12+7?"},
    {"role": "assistant", "content": streamed.content},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "19", "is_error": False}]},
]
with client.messages.stream(model=model, max_tokens=256, tools=tools, messages=history) as stream:
    text = "".join(stream.text_stream)
    final = stream.get_final_message()
show("stream tool result", final, text=text)
counted = client.messages.count_tokens(model=model, tools=tools, messages=[{"role": "user", "content": "What is 12+7?"}])
print(json.dumps({"step": "count_tokens", "input_tokens": counted.input_tokens}), flush=True)
