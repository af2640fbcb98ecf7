#!/bin/sh
# Runs Qwen Code (@qwen-code/qwen-code, installed by `anvil agents install qwen-code` into .cache/agents)
# as a black-box agent, unchanged: one headless run on the task's prompt ($1) with its OpenAI auth on the
# session, every tool approved (the sandbox confines it), JSON events on stdout (kept in $HOME/output.json).
#   OPENAI_BASE_URL / OPENAI_API_KEY  the session; OPENAI_MODEL is set to AGENT_MODEL (default anvil-tiny)
#   AGENT_MAX_STEPS                  its session-turn limit (default 30)
#   AGENT_WORKDIR                    where it works (default $PWD); HOME: its settings ($HOME/.qwen)
#   AGENT_BIN                        the qwen executable (default .cache/agents/node_modules/.bin/qwen)
#   AGENT_COMPACT=1                  a prompt that fits a small context: a short system prompt (QWEN_SYSTEM_MD),
#                                    its shell tool alone (--exclude-tools) and no startup discovery,
#                                    memory or skills (--bare)
# Offline: usage statistics, telemetry and the update check off in its settings.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
qwen="${AGENT_BIN:-$here/../../.cache/agents/node_modules/.bin/qwen}"
[ -x "$qwen" ] || { echo "qwen-code is not installed: anvil agents install qwen-code" >&2; exit 127; }
: "${OPENAI_BASE_URL:?the gateway session base URL}" "${OPENAI_API_KEY:?the session key}"
model="${AGENT_MODEL:-anvil-tiny}"
export OPENAI_MODEL="$model"
mkdir -p "$HOME/.qwen"
bare=""
if [ "${AGENT_COMPACT:-0}" = 1 ]; then
  printf '%s\n' 'You are a coding agent. Run shell commands with run_shell_command when needed, then answer briefly.' > "$HOME/.qwen/compact-system.md"
  export QWEN_SYSTEM_MD="$HOME/.qwen/compact-system.md"
  # --bare keeps read_file, edit and run_shell_command (and reads no settings for tools): two are excluded here
  bare="--bare --exclude-tools read_file,edit"
fi
cat > "$HOME/.qwen/settings.json" <<JSON
{
  "privacy": { "usageStatisticsEnabled": false },
  "telemetry": { "enabled": false },
  "general": { "disableAutoUpdate": true, "disableUpdateNag": true },
  "security": { "auth": { "selectedType": "openai" } }
}
JSON
cd "${AGENT_WORKDIR:-$PWD}"
rc=0
"$qwen" $bare --auth-type openai --model "$model" --approval-mode yolo --output-format json \
  --max-session-turns "${AGENT_MAX_STEPS:-30}" "$1" </dev/null >"$HOME/output.json" || rc=$?
cat "$HOME/output.json"
exit $rc
