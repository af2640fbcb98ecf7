import { z } from 'zod';
import { port, serviceBaseEnv } from '@anvil/config';
import type { DataPoolOptions } from './data-pool/data-pool.consumer';

/** Finish reasons compact filtering may cover (completed always trains; env_error and aborted are never trained). */
const COMPACTABLE_REASONS = ['max_context', 'max_steps', 'timeout'] as const;

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
  /** Compact filtering (DeepSWE): finish reasons kept for statistics with loss weight 0 (comma-separated; '' = none). */
  DATA_POOL_COMPACT_REASONS: z
    .string()
    .default('max_context,max_steps,timeout')
    .transform((v) =>
      v
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean),
    )
    .pipe(z.array(z.enum(COMPACTABLE_REASONS))),
  /** An environment failure is sent back for retry while its attempt number <= this (0 = never retried). */
  DATA_POOL_MAX_ENV_RETRIES: z.coerce.number().int().nonnegative().max(100).default(2),
  /** Over-long outputs: a rollout with a call stopped at max tokens gets loss weight 0 (and leaves its group's statistics) when true. */
  DATA_POOL_MASK_TRUNCATED: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
  DATA_POOL_CALL_WAIT_MS: z.coerce.number().int().nonnegative().default(30_000),
  DATA_POOL_GROUP_TIMEOUT_MS: z.coerce.number().int().positive().default(1_800_000),
  /** Batch statistics: the share of output tokens more than k policy versions old. */
  DATA_POOL_STALENESS_K: z.coerce.number().int().nonnegative().default(2),
  /** The run's scheduler lease: renewed every round; another instance takes over this long after the holder stops renewing. */
  DATA_POOL_LEASE_MS: z.coerce.number().int().positive().default(10_000),
  /** Retention: prune the call tokens and blobs of batches behind the newest full checkpoint this often (0 = never). */
  DATA_POOL_PRUNE_INTERVAL_MS: z.coerce.number().int().nonnegative().default(60_000),
});
export type MiddlewareConfig = z.infer<typeof middlewareEnv>;

/** The Data Pool's options from the validated environment (the runtime validates the rest: dataPoolConfig). */
export function dataPoolOptionsOf(c: MiddlewareConfig): DataPoolOptions {
  return {
    group: c.DATA_POOL_GROUP,
    concurrency: c.DATA_POOL_CONCURRENCY,
    migrateOnStart: c.DB_MIGRATE_ON_START,
    pruneIntervalMs: c.DATA_POOL_PRUNE_INTERVAL_MS,
    pool: {
      runId: c.DATA_POOL_RUN_ID,
      advantage: { estimator: c.DATA_POOL_ESTIMATOR, processRewardWeight: c.DATA_POOL_PROCESS_REWARD_WEIGHT },
      window: {
        inFlight: c.DATA_POOL_IN_FLIGHT,
        ...(c.DATA_POOL_WINDOW !== undefined ? { window: c.DATA_POOL_WINDOW } : {}),
        ...(c.DATA_POOL_HEAD_AGE_LIMIT_MS ? { headAgeLimitMs: c.DATA_POOL_HEAD_AGE_LIMIT_MS } : {}),
      },
      ...(c.DATA_POOL_BATCH_TRAJECTORIES ? { batchTrajectories: c.DATA_POOL_BATCH_TRAJECTORIES } : {}),
      ...(c.DATA_POOL_BATCH_TOKENS ? { batchTokens: c.DATA_POOL_BATCH_TOKENS } : {}),
      filters: {
        dropZeroVariance: c.DATA_POOL_DROP_ZERO_VARIANCE,
        compactReasons: c.DATA_POOL_COMPACT_REASONS,
        // a reason taken out of compact filtering is trained as an ordinary completion
        okReasons: ['completed', ...COMPACTABLE_REASONS.filter((r) => !c.DATA_POOL_COMPACT_REASONS.includes(r))],
        maxEnvRetries: c.DATA_POOL_MAX_ENV_RETRIES,
        maskTruncated: c.DATA_POOL_MASK_TRUNCATED,
      },
      callWaitMs: c.DATA_POOL_CALL_WAIT_MS,
      groupTimeoutMs: c.DATA_POOL_GROUP_TIMEOUT_MS,
      stalenessK: c.DATA_POOL_STALENESS_K,
      leaseMs: c.DATA_POOL_LEASE_MS,
    },
  };
}
