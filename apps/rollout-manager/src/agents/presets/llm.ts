import { readAgentFile } from './agent-files';
import { llmLog } from './transcripts';
import { PRESET_HOME, type AgentPreset } from './types';

/**
 * Simon Willison's `llm` CLI (PyPI llm, in a venv on /usr/bin/python3), through tools/agents/llm.sh:
 * one `llm prompt` to the session as an extra OpenAI-compatible model (LLM_USER_PATH under
 * $HOME). A one-shot chat, no tools: the answer is what it prints; the transcript is the
 * conversation it logged (`llm logs --json`, kept in $HOME/llm-log.json).
 */
export const llm: AgentPreset = {
  name: 'llm',
  summary: "llm (Simon Willison's CLI), one chat completion",
  install: { registry: 'pypi', package: 'llm', version: '0.36', bin: 'llm', module: 'llm' },
  env: ({ model }) => ({ AGENT_MODEL: model }),
  readOutput: async (workspace) => llmLog(await readAgentFile(workspace, `${PRESET_HOME}/llm-log.json`, 16 << 20)),
};
