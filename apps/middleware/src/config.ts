import { z } from 'zod';
import { port, serviceBaseEnv } from '@anvil/config';

export const middlewareEnv = z.object({
  ...serviceBaseEnv,
  PORT: port(8083),
  HOST: z.string().default('127.0.0.1'),
  /** Consumer group of the Data Pool's ingestion; one group per service. */
  DATA_POOL_GROUP: z.string().min(1).default('anvil.middleware.data-pool'),
  DATA_POOL_CONCURRENCY: z.coerce.number().int().positive().default(3),
  /** The Data Pool owns the schema: apply committed migrations (under an advisory lock) at start. */
  DB_MIGRATE_ON_START: z.enum(['true', 'false']).default('true').transform((v) => v === 'true'),
});
export type MiddlewareConfig = z.infer<typeof middlewareEnv>;
