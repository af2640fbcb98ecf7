// Rollout-group filters, applied when a group settles (README "Filters"):
//  1. environment failures (finishReason in envErrorReasons, default 'env_error') are dropped from
//     the group; those with attempts ≤ maxEnvRetries go back for retry, the rest are exhausted;
//  2. rollouts in dropReasons (default 'aborted': a straggler cut at the head age limit, an
//     evaluation pin) are dropped without retry;
//  3. compact filtering (DeepSWE): finish reasons in compactReasons (default max_context,
//     max_steps, timeout) keep the rollout for statistics with loss weight 0;
//  4. over-long outputs (outputTruncated: cut by max tokens) get loss weight 0 when maskTruncated
//     (DAPO's overlong filtering), else (default) they are trained on as they are: the outcome
//     reward already judges a cut-off answer, and masking also takes the rollout out of its
//     group's statistics, so it is a per-run choice, not a default that changes what a run learns;
//  5. the group is dropped when it has no trainable rollout (all_env_error / no_trainable), fewer
//     than minTrainable, or (dropZeroVariance, default on) its trainable rewards are all equal.

export interface FilterConfig {
  compactReasons: string[];
  envErrorReasons: string[];
  dropReasons: string[];
  /** Finish reasons of ordinary completions (weight 1). Any reason outside the four lists is an error. */
  okReasons: string[];
  dropZeroVariance: boolean;
  /** Retries of an environment failure: a rollout on attempt a (1 = first) is retried iff a ≤ maxEnvRetries. */
  maxEnvRetries: number;
  maskTruncated: boolean;
  /** Fewer trainable rollouts than this drops the group ('too_few_trainable'); default 1. */
  minTrainable: number;
  /** Rewards spanning at most this much are equal (default 1e-9). */
  zeroVarianceTolerance: number;
}

export type FilterDropReason = 'zero_variance' | 'all_env_error' | 'no_trainable' | 'too_few_trainable';

export interface FilterRollout {
  rolloutId: string;
  finishReason: string;
  /** null only for environment failures, dropped rollouts or compact-filtered ones that were never scored. */
  reward: number | null;
  outputTruncated?: boolean;
  /** Attempt number of this rollout (1 = first try; default 1). */
  attempts?: number;
}

export interface FilterCounts {
  total: number;
  trainable: number;
  compactMasked: number;
  truncatedMasked: number;
  envErrors: number;
  retried: number;
  exhausted: number;
  droppedOther: number;
  /** 1 when the trainable rewards are all equal (whether or not the group was dropped for it). */
  zeroVariance: 0 | 1;
}

export interface FilterResult {
  decision: 'keep' | 'drop';
  reason?: FilterDropReason;
  /** Loss weight of every rollout that stays in the group (env failures and dropped ones are not in it); all 0 when the group is dropped. */
  lossWeights: Map<string, number>;
  /** Environment failures to run again (attempts ≤ maxEnvRetries). */
  retry: string[];
  /** Rollouts removed from the group: every environment failure (retried or exhausted) and every dropReasons rollout. */
  dropped: string[];
  counts: FilterCounts;
}

/** Bad filter input or configuration; `field` names it. */
export class FilterInputError extends Error {
  override name = 'FilterInputError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

const KEYS = new Set([
  'compactReasons',
  'envErrorReasons',
  'dropReasons',
  'okReasons',
  'dropZeroVariance',
  'maxEnvRetries',
  'maskTruncated',
  'minTrainable',
  'zeroVarianceTolerance',
]);

function stringList(v: unknown, field: string): string[] {
  if (!Array.isArray(v) || v.some((s) => typeof s !== 'string' || s === ''))
    throw new FilterInputError(field, 'must be an array of non-empty strings');
  return [...v];
}

/** Validates a partial filter configuration and fills the defaults. */
export function filterConfig(input: Partial<FilterConfig> = {}): FilterConfig {
  if (!input || typeof input !== 'object') throw new FilterInputError('config', 'must be an object');
  for (const k of Object.keys(input)) if (!KEYS.has(k)) throw new FilterInputError(k, 'unknown filter config key');
  const cfg: FilterConfig = {
    compactReasons: stringList(input.compactReasons ?? ['max_context', 'max_steps', 'timeout'], 'compactReasons'),
    envErrorReasons: stringList(input.envErrorReasons ?? ['env_error'], 'envErrorReasons'),
    dropReasons: stringList(input.dropReasons ?? ['aborted'], 'dropReasons'),
    okReasons: stringList(input.okReasons ?? ['completed'], 'okReasons'),
    dropZeroVariance: input.dropZeroVariance ?? true,
    maxEnvRetries: input.maxEnvRetries ?? 2,
    maskTruncated: input.maskTruncated ?? false,
    minTrainable: input.minTrainable ?? 1,
    zeroVarianceTolerance: input.zeroVarianceTolerance ?? 1e-9,
  };
  if (typeof cfg.dropZeroVariance !== 'boolean') throw new FilterInputError('dropZeroVariance', 'must be a boolean');
  if (typeof cfg.maskTruncated !== 'boolean') throw new FilterInputError('maskTruncated', 'must be a boolean');
  if (!Number.isInteger(cfg.maxEnvRetries) || cfg.maxEnvRetries < 0)
    throw new FilterInputError('maxEnvRetries', `must be an integer >= 0, got ${cfg.maxEnvRetries}`);
  if (!Number.isInteger(cfg.minTrainable) || cfg.minTrainable < 1)
    throw new FilterInputError('minTrainable', `must be an integer >= 1, got ${cfg.minTrainable}`);
  if (!Number.isFinite(cfg.zeroVarianceTolerance) || cfg.zeroVarianceTolerance < 0)
    throw new FilterInputError('zeroVarianceTolerance', `must be finite and >= 0, got ${cfg.zeroVarianceTolerance}`);
  const seen = new Map<string, string>();
  for (const list of ['okReasons', 'compactReasons', 'envErrorReasons', 'dropReasons'] as const)
    for (const r of cfg[list]) {
      const prev = seen.get(r);
      if (prev && prev !== list) throw new FilterInputError(list, `finish reason '${r}' is also in ${prev}`);
      seen.set(r, list);
    }
  return cfg;
}

type ReasonClass = 'ok' | 'compact' | 'env' | 'drop';

function classify(finishReason: string, cfg: FilterConfig, field: string): ReasonClass {
  if (typeof finishReason !== 'string') throw new FilterInputError(field, 'must be a string');
  if (cfg.okReasons.includes(finishReason)) return 'ok';
  if (cfg.compactReasons.includes(finishReason)) return 'compact';
  if (cfg.envErrorReasons.includes(finishReason)) return 'env';
  if (cfg.dropReasons.includes(finishReason)) return 'drop';
  throw new FilterInputError(
    field,
    `unknown finish reason '${finishReason}' (not in okReasons, compactReasons, envErrorReasons or dropReasons)`,
  );
}

/** Compact-filter loss weight of one rollout: 0 for compact reasons (and for environment failures and dropped rollouts, which never train), 1 for completions. */
export function compactFilterWeight(finishReason: string, cfg: FilterConfig = filterConfig()): 0 | 1 {
  return classify(finishReason, cfg, 'finishReason') === 'ok' ? 1 : 0;
}

/** Applies the filters to one settled group. */
export function filterGroup(rollouts: FilterRollout[], cfg: FilterConfig): FilterResult {
  if (!Array.isArray(rollouts) || rollouts.length === 0) throw new FilterInputError('rollouts', 'must be a non-empty array');
  const c = filterConfig(cfg);
  const ids = new Set<string>();
  const lossWeights = new Map<string, number>();
  const retry: string[] = [];
  const dropped: string[] = [];
  const counts: FilterCounts = {
    total: rollouts.length,
    trainable: 0,
    compactMasked: 0,
    truncatedMasked: 0,
    envErrors: 0,
    retried: 0,
    exhausted: 0,
    droppedOther: 0,
    zeroVariance: 0,
  };
  const trainableRewards: number[] = [];
  rollouts.forEach((r, i) => {
    const f = `rollouts[${i}]`;
    if (!r || typeof r !== 'object') throw new FilterInputError(f, 'must be an object');
    if (typeof r.rolloutId !== 'string' || r.rolloutId === '') throw new FilterInputError(`${f}.rolloutId`, 'must be a non-empty string');
    if (ids.has(r.rolloutId)) throw new FilterInputError(`${f}.rolloutId`, `duplicate rollout ${r.rolloutId}`);
    ids.add(r.rolloutId);
    const attempts = r.attempts ?? 1;
    if (!Number.isInteger(attempts) || attempts < 1)
      throw new FilterInputError(`${f}.attempts`, `must be an integer >= 1, got ${String(r.attempts)}`);
    if (r.outputTruncated !== undefined && typeof r.outputTruncated !== 'boolean')
      throw new FilterInputError(`${f}.outputTruncated`, 'must be a boolean');
    if (r.reward !== null && (typeof r.reward !== 'number' || !Number.isFinite(r.reward)))
      throw new FilterInputError(`${f}.reward`, `must be a finite number or null, got ${String(r.reward)}`);
    const cls = classify(r.finishReason, c, `${f}.finishReason`);
    switch (cls) {
      case 'env':
        counts.envErrors++;
        dropped.push(r.rolloutId);
        if (attempts <= c.maxEnvRetries) {
          retry.push(r.rolloutId);
          counts.retried++;
        } else counts.exhausted++;
        return;
      case 'drop':
        counts.droppedOther++;
        dropped.push(r.rolloutId);
        return;
      case 'compact':
        counts.compactMasked++;
        lossWeights.set(r.rolloutId, 0);
        return;
      case 'ok':
        if (r.reward === null)
          throw new FilterInputError(`${f}.reward`, `is null for a '${r.finishReason}' rollout; a completed rollout must be scored`);
        if (r.outputTruncated && c.maskTruncated) {
          counts.truncatedMasked++;
          lossWeights.set(r.rolloutId, 0);
          return;
        }
        lossWeights.set(r.rolloutId, 1);
        counts.trainable++;
        trainableRewards.push(r.reward);
    }
  });
  let reason: FilterDropReason | undefined;
  if (trainableRewards.length > 0 && Math.max(...trainableRewards) - Math.min(...trainableRewards) <= c.zeroVarianceTolerance)
    counts.zeroVariance = 1;
  if (counts.trainable === 0) reason = counts.envErrors === counts.total ? 'all_env_error' : 'no_trainable';
  else if (counts.trainable < c.minTrainable) reason = 'too_few_trainable';
  else if (counts.zeroVariance && c.dropZeroVariance) reason = 'zero_variance';
  if (reason) for (const k of lossWeights.keys()) lossWeights.set(k, 0);
  return { decision: reason ? 'drop' : 'keep', ...(reason ? { reason } : {}), lossWeights, retry, dropped, counts };
}
