"""The openai Python SDK's Responses API against a gateway session, unchanged: a tool loop
(responses.create with tools, the function_call_output sent with previous_response_id), then the
same loop streamed (stream=True events, and the SDK's responses.stream helper, which checks the
event sequence). Prints one JSON line per call: what the client saw.
Env: ANVIL_BASE_URL (the session's base URL, .../v1), ANVIL_API_KEY, ANVIL_MODEL."""
import json
import os

from openai import OpenAI

client = OpenAI(base_url=os.environ["ANVIL_BASE_URL"], api_key=os.environ["ANVIL_API_KEY"], max_retries=0)
model = os.environ.get("ANVIL_MODEL", "anvil-tiny")
tools = [
    {
        "type": "function",
        "name": "add",
        "description": "a + b",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
    }
]


def show(step, response, **extra):
    print(json.dumps({"step": step, "status": response.status, "output_text": response.output_text,
                      "types": [o.type for o in response.output], **extra}), flush=True)


first = client.responses.create(model=model, input="What is 12+7?", tools=tools, instructions="Use the tools.")
show("create", first)
call = next(o for o in first.output if o.type == "function_call")
args = json.loads(call.arguments)
second = client.responses.create(
    model=model,
    previous_response_id=first.id,
    tools=tools,
    instructions="Use the tools.",
    input=[{"type": "function_call_output", "call_id": call.call_id, "output": str(args["a"] + args["b"])}],
)
show("tool result", second)

events = []
final = None
for event in client.responses.create(model=model, input="What is 12+7?", tools=tools, stream=True):
    events.append(event.type)
    if event.type == "response.completed":
        final = event.response
show("stream", final, events=events)
call = next(o for o in final.output if o.type == "function_call")
with client.responses.stream(
    model=model,
    previous_response_id=final.id,
    tools=tools,
    input=[{"type": "function_call_output", "call_id": call.call_id, "output": "19"}],
) as stream:
    deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
    done = stream.get_final_response()
show("stream helper", done, deltas="".join(deltas))
