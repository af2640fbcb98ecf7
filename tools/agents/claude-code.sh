#!/bin/sh
# Runs Claude Code (@anthropic-ai/claude-code, installed by tools/agents/install.mjs) as a black-box
# agent of the rollout manager, unchanged: `claude -p` on the task's prompt ($1), with
# ANTHROPIC_BASE_URL the rollout's gateway session (the per-session URL without /v1: the SDK adds
# /v1/messages) and the session key as ANTHROPIC_API_KEY.
#   OPENAI_BASE_URL / OPENAI_API_KEY   the session (set by the rollout manager)
#   HOME                               the rollout's workspace: Claude Code keeps its state in $HOME/.claude
#   ANVIL_WORKSPACE                    where it works (default $HOME); its answer is its last line on stdout
#   AGENT_WORKDIR                      where it works instead (the `claude-code` preset: the task's checkout)
#   AGENT_BIN                          the claude executable (default: under .cache/agents)
#   AGENT_MODEL                        the served model (default anvil-tiny), also for every background
#                                      model Claude Code would otherwise name (haiku, sonnet, opus)
#   AGENT_TOOLS                        its built-in tools (default: all of them; "Bash,Read" or "" for fewer)
#   AGENT_COMPACT=1                    a prompt that fits a small context: AGENT_TOOLS defaults to Bash alone
#                                      (with all tools Claude Code sends ~23k tokens to a byte-level tokenizer;
#                                      the built-in tiny model has 8192 positions)
#   AGENT_SYSTEM_PROMPT                replaces its system prompt (default: its own)
#   AGENT_MAX_REPLY                    max_tokens it asks for (CLAUDE_CODE_MAX_OUTPUT_TOKENS; its default asks for
#                                      32000, which the gateway clamps to what the context leaves)
# (A task set's agent.env may not name ANVIL_* or *TOKEN* variables: the rollout manager keeps those.)
# --bare: no hooks, plugins, CLAUDE.md discovery, auto-memory or background prefetch, so a rollout
# sees only its task. Permissions are skipped (IS_SANDBOX=1 lets it do so as root): nobody is
# there to approve a tool, and the agent is confined by its sandbox, not by prompts.
# Offline: telemetry, error reporting, the auto-updater and all non-essential traffic off: the
# session is the only host it connects to (checked with strace -e connect).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
claude="${AGENT_BIN:-${ANVIL_AGENTS_DIR:-$here/../../.cache/agents}/node_modules/.bin/claude}"
[ -x "$claude" ] || { echo "claude is not installed: node tools/agents/install.mjs claude-code" >&2; exit 127; }
: "${OPENAI_BASE_URL:?the gateway session base URL}" "${OPENAI_API_KEY:?the session key}"
model="${AGENT_MODEL:-anvil-tiny}"
export ANTHROPIC_BASE_URL="${OPENAI_BASE_URL%/v1}" ANTHROPIC_API_KEY="$OPENAI_API_KEY"
export ANTHROPIC_MODEL="$model" ANTHROPIC_SMALL_FAST_MODEL="$model" ANTHROPIC_DEFAULT_HAIKU_MODEL="$model"
export ANTHROPIC_DEFAULT_SONNET_MODEL="$model" ANTHROPIC_DEFAULT_OPUS_MODEL="$model"
export DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 IS_SANDBOX=1
cd "${AGENT_WORKDIR:-${ANVIL_WORKSPACE:-$HOME}}"
if [ -n "${AGENT_MAX_REPLY:-}" ]; then export CLAUDE_CODE_MAX_OUTPUT_TOKENS="$AGENT_MAX_REPLY"; fi
if [ "${AGENT_COMPACT:-0}" = 1 ] && [ "${AGENT_TOOLS+set}" != set ]; then AGENT_TOOLS=Bash; fi
set -- "$1"
if [ "${AGENT_TOOLS+set}" = set ]; then set -- "$@" --tools "$AGENT_TOOLS"; fi
if [ -n "${AGENT_SYSTEM_PROMPT:-}" ]; then set -- "$@" --system-prompt "$AGENT_SYSTEM_PROMPT"; fi
exec "$claude" -p --bare --model "$model" --output-format text --dangerously-skip-permissions --no-session-persistence "$@" </dev/null
