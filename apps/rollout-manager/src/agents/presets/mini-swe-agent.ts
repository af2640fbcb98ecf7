import { readAgentFile } from './agent-files';
import { miniTrajectory } from './transcripts';
import { PRESET_HOME, type AgentPreset } from './types';

/**
 * mini-swe-agent (PyPI mini-swe-agent, in a venv on /usr/bin/python3), through
 * tools/agents/mini-swe-agent.sh: `mini` with its default agent class (no prompts), its local
 * environment (commands run in the sandbox, in the task's checkout) and its default litellm
 * model class on the session (`openai/<served model>`), cost tracking ignored and litellm's
 * model map local. Its step limit is the rollout's maxSteps. Transcript and submission: the
 * trajectory it saves ($HOME/trajectory.json).
 */
export const miniSweAgent: AgentPreset = {
  name: 'mini-swe-agent',
  summary: 'mini-swe-agent (SWE-agent team), litellm on chat completions',
  install: { registry: 'pypi', package: 'mini-swe-agent', version: '2.4.6', bin: 'mini', module: 'minisweagent' },
  env: ({ model, maxSteps }) => ({ AGENT_MODEL: model, AGENT_MAX_STEPS: String(maxSteps) }),
  readOutput: async (workspace) => miniTrajectory(await readAgentFile(workspace, `${PRESET_HOME}/trajectory.json`, 32 << 20)),
};
