#!/bin/sh
# Runs Simon Willison's llm CLI (PyPI llm, installed by `anvil agents install llm` into a venv on
# /usr/bin/python3 under .cache/agents/python) as a black-box agent: one `llm prompt` on the task's prompt
# ($1) to the session (its reply is the answer file), registered as an extra OpenAI-compatible model; then its log of that exchange
# (`llm logs --json`) is kept in $HOME/llm-log.json as the transcript.
#   OPENAI_BASE_URL / OPENAI_API_KEY  the session; AGENT_MODEL the served model (default anvil-tiny)
#   AGENT_SYSTEM_PROMPT              a system prompt (default none)
#   AGENT_BIN                        the llm executable (default .cache/agents/python/llm/bin/llm)
# Its user directory (keys, logs, models) is $HOME/llm: nothing of another user's configuration is read.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
llm="${AGENT_BIN:-$here/../../.cache/agents/python/llm/bin/llm}"
[ -x "$llm" ] || { echo "llm is not installed: anvil agents install llm" >&2; exit 127; }
: "${OPENAI_BASE_URL:?the gateway session base URL}" "${OPENAI_API_KEY:?the session key}"
export LLM_USER_PATH="$HOME/llm"
mkdir -p "$LLM_USER_PATH"
cat > "$LLM_USER_PATH/extra-openai-models.yaml" <<YAML
- model_id: anvil-session
  model_name: "${AGENT_MODEL:-anvil-tiny}"
  api_base: "$OPENAI_BASE_URL"
  api_key_name: openai
YAML
cd "${AGENT_WORKDIR:-$PWD}"
set -- prompt -m anvil-session --no-stream "$1"
if [ -n "${AGENT_SYSTEM_PROMPT:-}" ]; then set -- "$@" --system "$AGENT_SYSTEM_PROMPT"; fi
# The whole reply is the answer (the manager would otherwise take only the last line printed).
"$llm" "$@" </dev/null >"$ANVIL_ANSWER_FILE"
cat "$ANVIL_ANSWER_FILE"
"$llm" logs -n 1 --json </dev/null >"$HOME/llm-log.json"
