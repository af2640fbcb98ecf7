#!/bin/sh
# Runs mini-swe-agent (PyPI mini-swe-agent, installed by `anvil agents install mini-swe-agent` into a venv
# on /usr/bin/python3 under .cache/agents/python) as a black-box agent, unchanged: `mini` with its default
# agent class (no confirmation prompts), its local environment (each command runs in this sandbox, in
# AGENT_WORKDIR) and its default model class (litellm, chat completions with a bash tool) on the session.
#   $1                               the task's prompt
#   OPENAI_BASE_URL / OPENAI_API_KEY  the session (litellm's openai/ provider reads them)
#   AGENT_MODEL                      the served model (default anvil-tiny), asked for as openai/AGENT_MODEL
#   AGENT_MAX_STEPS                  its step limit (default 30); AGENT_MAX_REPLY: max_tokens per call (default: the gateway's)
#   AGENT_WORKDIR                    where it works (default $PWD); HOME: its config; $HOME/trajectory.json its trajectory
#   AGENT_BIN                        the mini executable (default .cache/agents/python/mini-swe-agent/bin/mini)
# Offline: litellm's model-cost map is the packaged one (no download at import), cost tracking ignores
# the unknown model, and mini's first-run setup (a prompt) is skipped.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
mini="${AGENT_BIN:-$here/../../.cache/agents/python/mini-swe-agent/bin/mini}"
[ -x "$mini" ] || { echo "mini-swe-agent is not installed: anvil agents install mini-swe-agent" >&2; exit 127; }
: "${OPENAI_BASE_URL:?the gateway session base URL}" "${OPENAI_API_KEY:?the session key}"
export MSWEA_CONFIGURED=true MSWEA_SILENT_STARTUP=1 MSWEA_GLOBAL_CONFIG_DIR="$HOME/.config/mini-swe-agent"
export MSWEA_COST_TRACKING=ignore_errors LITELLM_LOCAL_MODEL_COST_MAP=True
cd "${AGENT_WORKDIR:-$PWD}"
set -- --agent-class default --environment-class local --model "openai/${AGENT_MODEL:-anvil-tiny}" --task "$1" --yolo \
  --exit-immediately -c mini.yaml -c "agent.step_limit=${AGENT_MAX_STEPS:-30}" -c "environment.cwd=$PWD" -o "$HOME/trajectory.json"
if [ -n "${AGENT_MAX_REPLY:-}" ]; then set -- "$@" -c "model.model_kwargs.max_tokens=$AGENT_MAX_REPLY"; fi
exec "$mini" "$@" </dev/null
