import { z } from 'zod';
import { httpUrl, port, positiveInt, secret, serviceBaseEnv } from '@anvil/config';

const flag = (fallback: 'true' | 'false') =>
  z
    .enum(['true', 'false'])
    .default(fallback)
    .transform((v) => v === 'true');

export const rolloutManagerEnv = z.object({
  ...serviceBaseEnv,
  PORT: port(8082),
  HOST: z.string().default('127.0.0.1'),
  GATEWAY_URL: httpUrl(),
  GATEWAY_ADMIN_TOKEN: secret(32),
  /** Model name sent to the gateway. */
  GATEWAY_MODEL_NAME: z.string().min(1).max(128).default('anvil-tiny'),
  /** Staleness bound η: current version − oldest in-flight version ≤ η. */
  MAX_STALENESS: z.coerce.number().int().nonnegative().default(4),
  /** B: groups per training step; admission capacity is (η + 1)·B groups in flight or untrained. */
  GROUPS_PER_STEP: positiveInt(8),
  GROUP_SIZE: positiveInt(8),
  /** N: rollouts running at once. */
  MAX_CONCURRENT_ROLLOUTS: positiveInt(64),
  INITIAL_POLICY_VERSION: z.coerce.number().int().nonnegative().default(0),
  ROLLOUT_CONSUMER_GROUP: z.string().min(1).default('anvil.rollout-manager'),
  ADMISSION_POLL_MS: positiveInt(500),
  /** Rollouts, the next to start, whose gateway sessions are opened while they wait for a slot (default ⌈N/4⌉; 0 = none). */
  ROLLOUT_SESSION_LOOKAHEAD: z.coerce.number().int().nonnegative().optional(),
  GATEWAY_REQUEST_TIMEOUT_MS: positiveInt(120_000),
  /** Apply committed migrations (under the shared advisory lock) at start: rm_groups / rm_rollouts must exist. */
  DB_MIGRATE_ON_START: flag('true'),
});
export type RolloutManagerConfig = z.infer<typeof rolloutManagerEnv>;
