"""The openai-agents SDK with its default model class (OpenAIResponsesModel: the Responses API)
against a gateway session, unchanged: an agent with one function tool runs its own loop (the model
calls the tool, the SDK runs it and sends the whole history back) to a final answer, once with
Runner.run and once streamed with Runner.run_streamed. Prints one JSON line per run.
Env: ANVIL_BASE_URL (the session's base URL, .../v1), ANVIL_API_KEY, ANVIL_MODEL."""
import asyncio
import json
import os

from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled
from agents.models.multi_provider import MultiProvider
from openai import AsyncOpenAI

set_tracing_disabled(True)
set_default_openai_client(AsyncOpenAI(base_url=os.environ["ANVIL_BASE_URL"], api_key=os.environ["ANVIL_API_KEY"], max_retries=0))


@function_tool
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


agent = Agent(name="calculator", instructions="Use the tools.", tools=[add], model=os.environ.get("ANVIL_MODEL", "anvil-tiny"))


async def main():
    # The model class the SDK builds by default for a model named by a string (what a run uses).
    print(json.dumps({"default_model_class": type(MultiProvider().get_model(agent.model)).__name__}), flush=True)
    result = await Runner.run(agent, "What is 12+7?")
    print(json.dumps({"run": "run", "final_output": result.final_output, "items": [i.type for i in result.new_items]}), flush=True)
    streamed = Runner.run_streamed(agent, "What is 12+7?")
    kinds = []
    async for event in streamed.stream_events():
        kinds.append(event.type)
    print(json.dumps({"run": "streamed", "final_output": streamed.final_output,
                      "items": [i.type for i in streamed.new_items], "raw_events": kinds.count("raw_response_event")}), flush=True)


asyncio.run(main())
