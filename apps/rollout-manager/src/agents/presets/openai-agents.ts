import type { AgentPreset } from './types';

/**
 * The OpenAI Agents SDK (PyPI openai-agents, in a venv on /usr/bin/python3) driven by a small
 * agent of ours (tools/agents/openai_agents_driver.py, copied into the venv): one Agent with a
 * shell tool, the SDK's default model class (OpenAIResponsesModel, the Responses API) on the
 * session, tracing off, at most maxSteps turns. The driver writes the answer file itself:
 * {"finalAnswer", "messages"} with its items as chat messages.
 */
export const openaiAgents: AgentPreset = {
  name: 'openai-agents',
  summary: 'OpenAI Agents SDK, a shell agent on the Responses API',
  install: {
    registry: 'pypi',
    package: 'openai-agents',
    version: '0.24.0',
    bin: 'python',
    module: 'agents',
    files: ['tools/agents/openai_agents_driver.py'],
  },
  env: ({ model, maxSteps }) => ({ AGENT_MODEL: model, AGENT_MAX_STEPS: String(maxSteps) }),
};
