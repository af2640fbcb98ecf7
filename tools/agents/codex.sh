#!/bin/sh
# Runs Codex CLI (@openai/codex, installed by tools/agents/install.mjs) as a black-box agent of the
# rollout manager, unchanged: `codex exec` on the task's prompt ($1), with a model provider whose
# base URL is the rollout's gateway session and wire_api "responses" (Codex speaks no other API).
#   OPENAI_BASE_URL / OPENAI_API_KEY   the session (set by the rollout manager)
#   HOME                               the rollout's workspace: Codex keeps its config and sessions in $HOME/.codex
#   ANVIL_WORKSPACE                    where it works (default $HOME); ANVIL_ANSWER_FILE gets its last message
#   AGENT_WORKDIR                      where it works instead (the `codex` preset: the task's checkout)
#   AGENT_BIN                          the codex executable (default: under .cache/agents)
#   AGENT_MODEL                        the served model (default anvil-tiny)
#   CODEX_SANDBOX_MODE                 Codex's own sandbox for the commands it runs (default workspace-write;
#                                      danger-full-access inside a sandbox that already confines the agent)
#   AGENT_COMPACT=1                    a prompt that fits a small context: short base instructions, no bundled
#                                      skills, sub-agents or optional tools (stock Codex sends ~28k tokens of
#                                      instructions and tools to a byte-level tokenizer; the built-in tiny
#                                      model has 8192 positions)
# (A task set's agent.env may not name ANVIL_* or *TOKEN* variables: the rollout manager keeps those.)
# Offline: no update check, analytics or feedback upload, and web search (a hosted tool) off: the
# session is the only host it connects to (checked with strace -e connect).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
codex="${AGENT_BIN:-${ANVIL_AGENTS_DIR:-$here/../../.cache/agents}/node_modules/.bin/codex}"
[ -x "$codex" ] || { echo "codex is not installed: node tools/agents/install.mjs codex" >&2; exit 127; }
: "${OPENAI_BASE_URL:?the gateway session base URL}" "${OPENAI_API_KEY:?the session key}"
workdir="${AGENT_WORKDIR:-${ANVIL_WORKSPACE:-$HOME}}"
answer="${ANVIL_ANSWER_FILE:-$HOME/answer}"
mkdir -p "$HOME/.codex"
top=""
tables=""
if [ "${AGENT_COMPACT:-0}" = 1 ]; then
  printf '%s\n' 'You are a coding agent. Run shell commands with exec_command when needed, then answer briefly.' > "$HOME/.codex/instructions.md"
  top="model_instructions_file = \"$HOME/.codex/instructions.md\""
  tables="[skills.bundled]
enabled = false
[agents]
enabled = false
[features]
goals = false
apps = false
plugins = false
image_generation = false
memories = false
tool_suggest = false
sleep_tool = false
hooks = false"
fi
cat > "$HOME/.codex/config.toml" <<TOML
model = "${AGENT_MODEL:-anvil-tiny}"
model_provider = "anvil"
approval_policy = "never"
sandbox_mode = "${CODEX_SANDBOX_MODE:-workspace-write}"
web_search = "disabled"
check_for_update_on_startup = false
$top
[analytics]
enabled = false
[feedback]
enabled = false
[model_providers.anvil]
name = "Anvil gateway session"
base_url = "$OPENAI_BASE_URL"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
$tables
TOML
exec "$codex" exec --skip-git-repo-check --cd "$workdir" --output-last-message "$answer" "$1" </dev/null
