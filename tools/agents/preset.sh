#!/bin/sh
# Runs a harness preset's agent (apps/rollout-manager/src/agents/presets/) for the rollout manager:
#   sh tools/agents/preset.sh NAME PROMPT     (NAME: codex, claude-code, qwen-code, mini-swe-agent, openai-agents, llm)
# Every preset gets the same start: HOME is a directory of the rollout's workspace ($ANVIL_WORKSPACE/.agent),
# so the agent's configuration, state and transcripts outlive its sandbox for the preset to read, and
# AGENT_WORKDIR is where it was started (the task's checkout, or the workspace), where it works. Then
# tools/agents/NAME.sh configures and starts the agent itself.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 2 ] || { echo "usage: sh tools/agents/preset.sh NAME PROMPT" >&2; exit 2; }
name=$1
[ -f "$here/$name.sh" ] || { echo "no agent preset $name (tools/agents/$name.sh)" >&2; exit 2; }
: "${ANVIL_WORKSPACE:?the rollout workspace}"
AGENT_WORKDIR=$PWD
HOME="$ANVIL_WORKSPACE/.agent"
export HOME AGENT_WORKDIR
mkdir -p "$HOME"
exec sh "$here/$name.sh" "$2"
