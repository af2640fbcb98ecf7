import { z } from 'zod';
import { httpUrl, port, positiveInt, secret, serviceBaseEnv } from '@anvil/config';

export const rolloutManagerEnv = z.object({
  ...serviceBaseEnv,
  PORT: port(8082),
  HOST: z.string().default('127.0.0.1'),
  GATEWAY_URL: httpUrl(),
  GATEWAY_ADMIN_TOKEN: secret(32),
  /** Staleness bound η: current version − oldest in-flight version ≤ η. */
  MAX_STALENESS: z.coerce.number().int().nonnegative().default(4),
  GROUP_SIZE: positiveInt(8),
  MAX_CONCURRENT_ROLLOUTS: positiveInt(64),
});
export type RolloutManagerConfig = z.infer<typeof rolloutManagerEnv>;
