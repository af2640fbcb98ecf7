#!/bin/sh
# Runs the `llm` CLI (installed from PyPI, see requirements.txt) as a black-box agent of the
# rollout manager, unchanged: this only points it at the rollout's gateway session and hands it
# the task's prompt ($1) and the environment's tools. llm then runs its own loop: a chat call, the
# tool calls the model asks for, their results sent back, until the model answers (at most
# AGENT_MAX_TURNS tool rounds). Its answer is the last line it prints.
#   OPENAI_BASE_URL / OPENAI_API_KEY: the session (set by the rollout manager)
#   HOME: the rollout's own workspace (llm keeps its configuration there)
set -eu
cat > "$HOME/extra-openai-models.yaml" <<YAML
- model_id: anvil
  model_name: ${AGENT_MODEL:-anvil-tiny}
  api_base: "$OPENAI_BASE_URL"
  supports_tools: true
YAML
export LLM_USER_PATH="$HOME"
exec llm prompt -m anvil --no-stream --no-log --chain-limit "${AGENT_MAX_TURNS:-6}" -o max_tokens "${LLM_MAX_REPLY:-128}" --functions "$(dirname "$0")/tools.py" "$1" </dev/null
