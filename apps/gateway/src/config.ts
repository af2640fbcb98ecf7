import { z } from 'zod';
import { httpUrl, port, positiveInt, secret, serviceBaseEnv } from '@anvil/config';

export const gatewayEnv = z.object({
  ...serviceBaseEnv,
  PORT: port(8080),
  HOST: z.string().default('127.0.0.1'),
  /** Credential of the admin API the rollout manager uses to open and close sessions. */
  GATEWAY_ADMIN_TOKEN: secret(32),
  INFERENCE_PROXY_URL: httpUrl(),
  MAX_REQUEST_BYTES: positiveInt(4 * 1024 * 1024),
});
export type GatewayConfig = z.infer<typeof gatewayEnv>;
