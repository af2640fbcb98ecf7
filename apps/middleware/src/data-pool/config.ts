import { randomUUID } from 'node:crypto';
import { ROLLOUT_FINISH_REASONS } from '@anvil/contracts';
import { filterConfig, FilterInputError, type AdvantageConfig, type FilterConfig, type WindowConfig } from '@anvil/rl';

export interface DataPoolConfig {
  /** One scheduler, one queue and one step counter per run. */
  runId: string;
  /** Event producer name (and the outbox's). */
  producer: string;
  /** This instance's name in the scheduler lease. */
  owner: string;
  advantage: AdvantageConfig;
  /**
   * libs/rl's group filters, applied when a group settles: compact filtering (compactReasons:
   * kept for statistics, loss weight 0), environment failures (envErrorReasons: dropped, sent
   * back for retry while attempts <= maxEnvRetries), aborted rollouts (dropReasons: dropped),
   * over-long outputs (a call stopped at max tokens: masked when maskTruncated, else kept) and
   * the zero-variance drop (dropZeroVariance). Every rollout finish reason must be in one list.
   */
  filters: FilterConfig;
  /** Windowed FIFO: N in flight, W fixed or 'adaptive', head age limit. */
  window: WindowConfig;
  /** Cut a batch of exactly this many trajectories (count mode) ... */
  batchTrajectories?: number;
  /** ... or fill up to this many tokens (token-budget mode; prompt + output over samples). */
  batchTokens?: number;
  /** Token staleness statistic: share of output tokens more than k versions old. */
  stalenessK: number;
  /** A completed rollout waits this long for its missing calls, then is dropped with the reason. */
  callWaitMs: number;
  /** A group not settled this long after its first rollout started is settled with what completed. */
  groupTimeoutMs: number;
  /** The scheduler lease: renewed every tick, taken over when it lapses. */
  leaseMs: number;
}

/** What callers pass: any field, the filters as a partial FilterConfig (libs/rl's defaults fill the rest). */
export type DataPoolConfigInput = Partial<Omit<DataPoolConfig, 'filters'>> & { filters?: Partial<FilterConfig> };

export function dataPoolConfig(input: DataPoolConfigInput = {}): DataPoolConfig {
  const problems: string[] = [];
  let filters: FilterConfig;
  try {
    filters = filterConfig(input.filters ?? {});
  } catch (err) {
    if (!(err instanceof FilterInputError)) throw err;
    problems.push(`filters.${err.message}`);
    filters = filterConfig();
  }
  // a finish reason in no list would make filterGroup throw at settle time: refuse it at start
  const listed = new Set([...filters.okReasons, ...filters.compactReasons, ...filters.envErrorReasons, ...filters.dropReasons]);
  const unlisted = ROLLOUT_FINISH_REASONS.filter((r) => !listed.has(r));
  if (unlisted.length)
    problems.push(`filters: finish reason(s) ${unlisted.join(', ')} in none of okReasons, compactReasons, envErrorReasons, dropReasons`);
  const c: DataPoolConfig = {
    runId: 'default',
    producer: 'data-pool',
    owner: `data-pool-${randomUUID().slice(0, 8)}`,
    advantage: { estimator: 'grpo' },
    window: { inFlight: 8 },
    stalenessK: 2,
    callWaitMs: 30_000,
    groupTimeoutMs: 30 * 60_000,
    leaseMs: 10_000,
    ...input,
    filters,
  };
  if (c.batchTrajectories === undefined && c.batchTokens === undefined) c.batchTrajectories = 4;
  if (c.batchTrajectories !== undefined && !(Number.isInteger(c.batchTrajectories) && c.batchTrajectories > 0))
    problems.push(`batchTrajectories: must be a positive integer, got ${c.batchTrajectories}`);
  if (c.batchTokens !== undefined && !(Number.isInteger(c.batchTokens) && c.batchTokens > 0))
    problems.push(`batchTokens: must be a positive integer, got ${c.batchTokens}`);
  for (const k of ['callWaitMs', 'groupTimeoutMs', 'leaseMs', 'stalenessK'] as const)
    if (!(Number.isFinite(c[k]) && c[k] >= 0)) problems.push(`${k}: must be a non-negative number, got ${c[k]}`);
  if (problems.length) throw new DataPoolConfigError(problems);
  return c;
}

export class DataPoolConfigError extends Error {
  override name = 'DataPoolConfigError';
  constructor(readonly problems: string[]) {
    super(`invalid Data Pool config: ${problems.join('; ')}`);
  }
}
