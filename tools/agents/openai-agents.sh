#!/bin/sh
# Runs an agent of the OpenAI Agents SDK (PyPI openai-agents, installed by `anvil agents install
# openai-agents` into a venv on /usr/bin/python3 under .cache/agents/python) as a black-box agent: our
# small driver (openai_agents_driver.py, copied into the venv) on the task's prompt ($1), with the SDK's
# default model class (the Responses API) on the session and tracing off.
#   OPENAI_BASE_URL / OPENAI_API_KEY  the session (the SDK's default client reads them)
#   AGENT_MODEL                      the served model (default anvil-tiny); AGENT_MAX_STEPS: max turns (default 30)
#   AGENT_SYSTEM_PROMPT              its instructions (default: a short coding-agent instruction)
#   AGENT_WORKDIR                    where its shell tool runs (default $PWD); ANVIL_ANSWER_FILE gets {finalAnswer, messages}
#   AGENT_BIN                        the venv's python (default .cache/agents/python/openai-agents/bin/python)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python="${AGENT_BIN:-$here/../../.cache/agents/python/openai-agents/bin/python}"
driver="$(dirname "$(dirname "$python")")/openai_agents_driver.py"
[ -x "$python" ] && [ -f "$driver" ] || { echo "openai-agents is not installed: anvil agents install openai-agents" >&2; exit 127; }
: "${OPENAI_BASE_URL:?the gateway session base URL}" "${OPENAI_API_KEY:?the session key}"
export OPENAI_AGENTS_DISABLE_TRACING=1 OPENAI_DEFAULT_MODEL="${AGENT_MODEL:-anvil-tiny}"
cd "${AGENT_WORKDIR:-$PWD}"
exec "$python" "$driver" "$1" </dev/null
