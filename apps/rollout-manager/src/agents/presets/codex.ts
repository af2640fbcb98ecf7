import { readAgentFile } from './agent-files';
import { codexSessionMessages } from './transcripts';
import type { AgentPreset } from './types';

/**
 * Codex CLI (npm @openai/codex; speaks only the Responses API), through tools/agents/codex.sh:
 * `codex exec` with a model provider on the session, offline (no update check, analytics,
 * feedback or web search), Codex's own command sandbox off inside ours. Its last message is the
 * answer file; its transcript is the session log it keeps under $HOME/.codex/sessions.
 */
export const codex: AgentPreset = {
  name: 'codex',
  summary: 'Codex CLI (OpenAI), the Responses API',
  install: { registry: 'npm', package: '@openai/codex', version: '0.171.0', bin: 'codex' },
  env: ({ model }) => ({ AGENT_MODEL: model, CODEX_SANDBOX_MODE: 'danger-full-access' }),
  readOutput: async (workspace) => {
    const messages = await codexSessionMessages(workspace);
    return messages ? { finalAnswer: (await readAgentFile(workspace, 'answer', 1 << 20))?.trim() ?? null, messages } : null;
  },
};
