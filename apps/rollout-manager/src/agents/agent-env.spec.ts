import { describe, expect, it } from 'vitest';
import { AgentSpecError, checkAgentEnv, refusedAgentEnvName } from './agent-env';

describe('agent.env names', () => {
  it('passes names that carry no credential and that the manager does not set (qwen-code needs OPENAI_MODEL)', () => {
    const harmless = [
      'OPENAI_MODEL',
      'ANTHROPIC_MODEL',
      'OPENAI_ORG_ID',
      'OPENAI_TIMEOUT',
      'MODE',
      'PATH',
      'AGENT_MAX_TURNS',
      'LLM_MAX_REPLY',
    ];
    for (const name of harmless) expect(refusedAgentEnvName(name), name).toBeNull();
    expect(() => checkAgentEnv(Object.fromEntries(harmless.map((n) => [n, 'x'])))).not.toThrow();
  });

  it('refuses the names the manager owns: the session URL and key under every provider spelling, every ANVIL_*', () => {
    for (const name of [
      'OPENAI_BASE_URL',
      'OPENAI_API_BASE',
      'OPENAI_API_KEY',
      'ANTHROPIC_BASE_URL',
      'ANTHROPIC_API_KEY',
      'ANTHROPIC_AUTH_TOKEN',
      'OPENAI_API_HOST',
      'OPENAI_ENDPOINT',
      'anthropic_base_url',
      'ANVIL_TASK_FILE',
      'ANVIL_ANYTHING',
    ])
      expect(refusedAgentEnvName(name), name).toBe('manager-owned');
  });

  it('refuses credential-like names', () => {
    for (const name of [
      'GITHUB_TOKEN',
      'HF_TOKEN',
      'MY_SECRET',
      'PGPASSWORD',
      'DEPLOY_KEY',
      'AWS_REGION',
      'DATABASE_URL',
      'KAFKA_BROKERS',
      'X_APIKEY',
    ])
      expect(refusedAgentEnvName(name), name).toBe('credential-like');
  });

  it('names every refused name at once, with why', () => {
    expect(() => checkAgentEnv({ GITHUB_TOKEN: 'x', OPENAI_MODEL: 'm', OPENAI_API_BASE: 'http://elsewhere' })).toThrow(AgentSpecError);
    expect(() => checkAgentEnv({ GITHUB_TOKEN: 'x', OPENAI_MODEL: 'm', OPENAI_API_BASE: 'http://elsewhere' })).toThrow(
      /^agent\.env: GITHUB_TOKEN \(credential-like\), OPENAI_API_BASE \(manager-owned\) cannot be passed to agents/,
    );
  });
});
