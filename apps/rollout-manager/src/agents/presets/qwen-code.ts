import { readAgentFile } from './agent-files';
import { qwenOutput } from './transcripts';
import { PRESET_HOME, type AgentPreset } from './types';

/**
 * Qwen Code (npm @qwen-code/qwen-code; OpenAI chat completions), through tools/agents/qwen-code.sh:
 * one headless run (`qwen --auth-type openai --approval-mode yolo --output-format json`) with
 * OPENAI_MODEL the served model, usage statistics, telemetry and update checks off in its
 * settings. 0.15.10 is the newest release whose engines allow Node 20 (0.21 on need Node 22).
 * Its answer and transcript are the JSON events it prints, kept in $HOME/output.json.
 */
export const qwenCode: AgentPreset = {
  name: 'qwen-code',
  summary: 'Qwen Code, OpenAI chat completions',
  install: { registry: 'npm', package: '@qwen-code/qwen-code', version: '0.15.10', bin: 'qwen' },
  env: ({ model, maxSteps }) => ({ AGENT_MODEL: model, AGENT_MAX_STEPS: String(maxSteps) }),
  readOutput: async (workspace) => qwenOutput(await readAgentFile(workspace, `${PRESET_HOME}/output.json`, 16 << 20)),
};
