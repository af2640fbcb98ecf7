import type { AgentPreset } from './types';

/**
 * Claude Code (npm @anthropic-ai/claude-code; the Messages API), through tools/agents/claude-code.sh:
 * `claude -p --bare` with ANTHROPIC_BASE_URL the session, every model it would name mapped to
 * the served one, telemetry, error reporting and the updater off. 2.1.197 is the newest release
 * whose engines allow Node 20. It keeps no session (--no-session-persistence): its answer is the
 * last line it prints.
 */
export const claudeCode: AgentPreset = {
  name: 'claude-code',
  summary: 'Claude Code (Anthropic), the Messages API',
  install: { registry: 'npm', package: '@anthropic-ai/claude-code', version: '2.1.197', bin: 'claude' },
  env: ({ model }) => ({ AGENT_MODEL: model }),
};
