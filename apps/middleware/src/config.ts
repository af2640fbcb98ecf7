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
  DB_MIGRATE_ON_START: z
    .enum(['true', 'false'])
    .default('true')
    .transform((v) => v === 'true'),
  /** The run this Data Pool schedules (one active scheduler per run, see README). */
  DATA_POOL_RUN_ID: z.string().min(1).max(128).default('default'),
  DATA_POOL_ESTIMATOR: z.enum(['grpo', 'dr_grpo', 'rloo', 'reinforce_pp']).default('grpo'),
  /** λ of the process-reward rule (libs/rl): each call's advantage = its rollout's + λ · its normalised process reward; 0 = outcome only. */
  DATA_POOL_PROCESS_REWARD_WEIGHT: z.coerce.number().min(0).max(100).default(0),
  /** Windowed FIFO: N in flight and W (an integer, or 'adaptive'; default round(0.3 N)). */
  DATA_POOL_IN_FLIGHT: z.coerce.number().int().positive().default(8),
  DATA_POOL_WINDOW: z.union([z.literal('adaptive'), z.coerce.number().int().positive()]).optional(),
  DATA_POOL_HEAD_AGE_LIMIT_MS: z.coerce.number().int().positive().optional(),
  /** Batch by trajectory count, or (if set) by token budget. */
  DATA_POOL_BATCH_TRAJECTORIES: z.coerce.number().int().positive().optional(),
  DATA_POOL_BATCH_TOKENS: z.coerce.number().int().positive().optional(),
  DATA_POOL_DROP_ZERO_VARIANCE: z
    .enum(['true', 'false'])
    .default('true')
    .transform((v) => v === 'true'),
  DATA_POOL_CALL_WAIT_MS: z.coerce.number().int().nonnegative().default(30_000),
  DATA_POOL_GROUP_TIMEOUT_MS: z.coerce.number().int().positive().default(1_800_000),
});
export type MiddlewareConfig = z.infer<typeof middlewareEnv>;
