#!/usr/bin/env python3
"""A black-box agent on the official `openai` Python package (pip install openai), knowing
nothing about Anvil: it reads the task from stdin (JSON {messages, tools} as the rollout
manager writes it, or plain text), runs the usual tool loop against OPENAI_BASE_URL, executes
the tools it knows (add, calculator), and leaves its transcript in $ANVIL_ANSWER_FILE (if set)
and its final answer on the last stdout line.

    echo '{"messages":[{"role":"user","content":"12+7+30"}]}' | OPENAI_BASE_URL=... python3 examples/python-agent/agent.py
"""
import json
import os
import sys

from openai import OpenAI


def run_tool(name, arguments):
    try:
        args = json.loads(arguments)
    except json.JSONDecodeError:
        return "error: arguments must be JSON"
    if name == "add":
        a, b = args.get("a"), args.get("b")
        if isinstance(a, int) and isinstance(b, int):
            return str(a + b)
        return "error: add needs integer arguments a and b"
    return f"error: unknown tool {name}"


def main():
    raw = sys.stdin.read()
    try:
        task = json.loads(raw)
        messages = task["messages"]
        tools = task.get("tools") or []
    except (json.JSONDecodeError, KeyError, TypeError):
        messages, tools = [{"role": "user", "content": raw.strip()}], []
    client = OpenAI(max_retries=2, timeout=60)  # OPENAI_BASE_URL / OPENAI_API_KEY from the environment
    model = os.environ.get("AGENT_MODEL", "anvil-tiny")
    max_turns = int(os.environ.get("AGENT_MAX_TURNS", "6"))
    answer = None
    for turn in range(max_turns):
        kwargs = {"model": model, "messages": messages, "max_tokens": 128, "temperature": 1.0}
        if tools:
            kwargs["tools"] = tools
        completion = client.chat.completions.create(**kwargs)
        msg = completion.choices[0].message
        entry = {"role": "assistant", "content": msg.content}
        if msg.tool_calls:
            entry["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}} for c in msg.tool_calls
            ]
        messages.append(entry)
        if not msg.tool_calls:
            answer = msg.content
            break
        for c in msg.tool_calls:
            messages.append({"role": "tool", "tool_call_id": c.id, "content": run_tool(c.function.name, c.function.arguments)})
    path = os.environ.get("ANVIL_ANSWER_FILE")
    if path:
        with open(path, "w") as f:
            json.dump({"messages": messages, "finalAnswer": answer}, f)
    print(json.dumps({"turns": turn + 1, "finalAnswer": answer}))


if __name__ == "__main__":
    main()
