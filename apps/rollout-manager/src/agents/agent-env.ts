/**
 * Which names a task set's `agent.env` may give a black-box agent. Two kinds are refused, and
 * everything else passes (OPENAI_MODEL, which qwen-code reads the served model's name from,
 * ANTHROPIC_MODEL, OPENAI_ORG_ID, the agent's own settings, PATH):
 *
 *  - Names the manager owns. Every ANVIL_* (the task, answer and workspace paths, and any it adds
 *    later), and the variables that say where an agent's model is and which key opens it: those
 *    the manager or its sandbox sets per session (OPENAI_BASE_URL, OPENAI_API_BASE,
 *    OPENAI_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN) and any other
 *    OPENAI_* or ANTHROPIC_* naming an endpoint (…BASE…, …URL…, …ENDPOINT…, …HOST…). Another
 *    value would send the agent's calls past its session, unrecorded, or with a key that opens
 *    something else.
 *  - Credential-like names (…TOKEN…, …SECRET…, …PASSWORD…, …_KEY, cloud, database and broker
 *    settings). A task set is stored (task_sets.config) and shown in reports, no place for a
 *    secret, and an agent holds no key but its session's.
 */
const MANAGER_OWNED = new Set([
  'OPENAI_BASE_URL',
  'OPENAI_API_BASE',
  'OPENAI_API_KEY',
  'ANTHROPIC_BASE_URL',
  'ANTHROPIC_API_KEY',
  'ANTHROPIC_AUTH_TOKEN',
]);
const MANAGER_OWNED_PREFIX = /^ANVIL_/i;
const PROVIDER_ENDPOINT = /^(OPENAI|ANTHROPIC)_\w*(BASE|URL|ENDPOINT|HOST)/i;
const CREDENTIAL_NAME =
  /(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|COOKIE|PRIVATE|DATABASE_URL|KAFKA|AWS_|GOOGLE_|AZURE_|APIKEY|_KEY$|^KEY$)/i;

export class AgentSpecError extends Error {
  override readonly name = 'AgentSpecError';
}

/** Why `name` may not be passed to an agent, or null when it may. */
export function refusedAgentEnvName(name: string): 'manager-owned' | 'credential-like' | null {
  if (MANAGER_OWNED.has(name.toUpperCase()) || MANAGER_OWNED_PREFIX.test(name) || PROVIDER_ENDPOINT.test(name)) return 'manager-owned';
  if (CREDENTIAL_NAME.test(name)) return 'credential-like';
  return null;
}

/** Load-time check of a task set's agent.env: every refused name at once, each with why. */
export function checkAgentEnv(env: Record<string, string>): void {
  const bad = Object.keys(env).flatMap((k) => {
    const why = refusedAgentEnvName(k);
    return why ? [`${k} (${why})`] : [];
  });
  if (bad.length)
    throw new AgentSpecError(
      `agent.env: ${bad.join(', ')} cannot be passed to agents: the manager sets the session's URL and key (and every ANVIL_* name) itself, and a task set holds no secrets`,
    );
}
