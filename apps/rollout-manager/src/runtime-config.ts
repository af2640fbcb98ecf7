import type { RolloutManagerConfig } from './config';
import type { RolloutRuntimeConfig } from './runtime';

/** The RolloutRuntime's settings from the service's validated environment: the service and the in-process host build it alike. */
export function rolloutRuntimeConfigOf(config: RolloutManagerConfig): Partial<RolloutRuntimeConfig> {
  return {
    model: config.GATEWAY_MODEL_NAME,
    eta: config.MAX_STALENESS,
    groupsPerStep: config.GROUPS_PER_STEP,
    groupSize: config.GROUP_SIZE,
    concurrency: config.MAX_CONCURRENT_ROLLOUTS,
    initialPolicyVersion: config.INITIAL_POLICY_VERSION,
    consumerGroup: config.ROLLOUT_CONSUMER_GROUP,
    admissionPollMs: config.ADMISSION_POLL_MS,
    requestTimeoutMs: config.GATEWAY_REQUEST_TIMEOUT_MS,
    sessionLookahead: config.ROLLOUT_SESSION_LOOKAHEAD,
  };
}
