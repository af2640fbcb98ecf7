"""A small coding agent on the OpenAI Agents SDK, for Anvil's `openai-agents` harness preset.

One Agent with a shell tool, run on the task's prompt (argv[1]) with the SDK's default model class
(OpenAIResponsesModel through the default provider, which reads OPENAI_BASE_URL / OPENAI_API_KEY,
and OPENAI_DEFAULT_MODEL for the model's name) for at most AGENT_MAX_STEPS turns. It writes
{"finalAnswer", "messages"} to ANVIL_ANSWER_FILE (its items as OpenAI chat messages) and prints the
answer. Running out of turns is an ordinary end (no answer); a failure of the model's API is not.
"""

import json
import os
import subprocess
import sys

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.exceptions import MaxTurnsExceeded

INSTRUCTIONS = "You are a coding agent. Use the shell tool to inspect and change files, then answer briefly."
OUTPUT_CAP = 20_000


@function_tool
def shell(command: str) -> str:
    """Runs a shell command in the working directory; returns its exit code and output."""
    try:
        r = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "error: the command did not finish within 120 s"
    out = (r.stdout + r.stderr)[-OUTPUT_CAP:]
    return f"exit code {r.returncode}\n{out}"


def text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def chat_messages(items, system):
    """Responses items (user/assistant messages, function calls and their outputs) as chat messages."""
    messages = [{"role": "system", "content": system}]
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": item.get("role", "user"), "content": text_of(item.get("content"))})
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = messages[-1]
            if last["role"] == "assistant" and last.get("tool_calls") is not None:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": text_of(item.get("output"))})
    return messages


def main():
    set_tracing_disabled(True)
    system = os.environ.get("AGENT_SYSTEM_PROMPT") or INSTRUCTIONS
    agent = Agent(name="coder", instructions=system, tools=[shell])
    max_turns = int(os.environ.get("AGENT_MAX_STEPS", "30"))
    answer = None
    try:
        result = Runner.run_sync(agent, sys.argv[1], max_turns=max_turns)
        answer = None if result.final_output is None else str(result.final_output)
        items = result.to_input_list()
    except MaxTurnsExceeded as e:
        data = getattr(e, "run_data", None)
        items = [{"role": "user", "content": sys.argv[1]}]
        if data is not None:
            items += [i.to_input_item() for i in data.new_items]
    with open(os.environ["ANVIL_ANSWER_FILE"], "w") as f:
        json.dump({"finalAnswer": answer, "messages": chat_messages(items, system)}, f)
    print(answer if answer is not None else "(no answer: out of turns)")


if __name__ == "__main__":
    main()
