// Group-relative advantages over the G rollouts of one task, and the rule that combines per-call
// process rewards with the outcome reward. See libs/rl/README.md ("Advantages").

export type AdvantageEstimator = 'grpo' | 'dr_grpo' | 'rloo' | 'reinforce_pp';
export const ADVANTAGE_ESTIMATORS: readonly AdvantageEstimator[] = ['grpo', 'dr_grpo', 'rloo', 'reinforce_pp'];

export interface RolloutScore {
  rolloutId: string;
  outcomeReward: number;
  /** One reward per LLM call of the rollout, in call order. */
  processRewards?: number[];
  /** Compact-filtered (loss weight 0): left out of the statistics unless includeMaskedInStats. */
  masked?: boolean;
}

export interface AdvantageConfig {
  estimator: AdvantageEstimator;
  /** Added to the std before dividing (grpo, reinforce_pp); default 1e-6. */
  stdEpsilon?: number;
  /** Count masked rollouts in the group statistics (default false). */
  includeMaskedInStats?: boolean;
  /** λ of the process-reward rule (default 0: process rewards are ignored and perCall broadcasts the outcome advantage). */
  processRewardWeight?: number;
  /** Per-task running baseline: replaces the group mean (grpo, dr_grpo, reinforce_pp); read before, updated after each group. */
  baseline?: RunningBaseline;
  /** Use the sample std (n − 1) instead of the population std (default false: population). */
  unbiasedStd?: boolean;
  /** A group whose statistics rewards span at most this much is zero-variance (default 1e-9). */
  zeroVarianceTolerance?: number;
}

export interface GroupAdvantages {
  /** One advantage per rollout, in input order (0 for masked rollouts left out of the statistics). */
  perRollout: number[];
  /** Present when the group carries process rewards: one advantage per call of each rollout. */
  perCall?: number[][];
  /** Every advantage is 0 because the statistics' rewards (outcome, and process when weighted) are all equal. */
  zeroVariance: boolean;
  /** Baseline subtracted (group mean, or the running baseline). */
  mean: number;
  /** Std divided by (grpo: the group's; reinforce_pp: the batch's; 0 for dr_grpo and rloo). */
  std: number;
  /** Rollouts in the statistics. */
  statsCount: number;
}

/** Bad advantage input or configuration; `field` names it (e.g. group[2].outcomeReward). */
export class AdvantageInputError extends Error {
  override name = 'AdvantageInputError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

/** Exponential moving average of each task's mean reward: v ← decay·v + (1 − decay)·mean(rewards); the first update sets v = mean. */
export class RunningBaseline {
  private readonly decay: number;
  private readonly values = new Map<string, number>();

  constructor(opts: { decay?: number } = {}) {
    const decay = opts.decay ?? 0.9;
    if (!Number.isFinite(decay) || decay < 0 || decay >= 1) throw new AdvantageInputError('decay', `must be in [0, 1), got ${decay}`);
    this.decay = decay;
  }

  value(taskId: string): number | undefined {
    if (typeof taskId !== 'string' || taskId === '') throw new AdvantageInputError('taskId', 'must be a non-empty string');
    return this.values.get(taskId);
  }

  update(taskId: string, rewards: number[]): void {
    if (typeof taskId !== 'string' || taskId === '') throw new AdvantageInputError('taskId', 'must be a non-empty string');
    if (!Array.isArray(rewards) || rewards.length === 0) throw new AdvantageInputError('rewards', 'must be a non-empty array');
    rewards.forEach((r, i) => {
      if (!Number.isFinite(r)) throw new AdvantageInputError(`rewards[${i}]`, `is not finite (${r})`);
    });
    const m = rewards.reduce((a, b) => a + b, 0) / rewards.length;
    const v = this.values.get(taskId);
    this.values.set(taskId, v === undefined ? m : this.decay * v + (1 - this.decay) * m);
  }

  /** Durable form (resume): [taskId, value] pairs. */
  snapshot(): [string, number][] {
    return [...this.values.entries()];
  }

  static restore(entries: [string, number][], opts: { decay?: number } = {}): RunningBaseline {
    const b = new RunningBaseline(opts);
    entries.forEach(([k, v], i) => {
      if (typeof k !== 'string' || k === '' || !Number.isFinite(v))
        throw new AdvantageInputError(`entries[${i}]`, 'must be [non-empty taskId, finite value]');
      b.values.set(k, v);
    });
    return b;
  }
}

const CONFIG_KEYS = new Set([
  'estimator',
  'stdEpsilon',
  'includeMaskedInStats',
  'processRewardWeight',
  'baseline',
  'unbiasedStd',
  'zeroVarianceTolerance',
]);

function validateConfig(cfg: AdvantageConfig): Required<Omit<AdvantageConfig, 'baseline'>> & { baseline?: RunningBaseline } {
  if (!cfg || typeof cfg !== 'object') throw new AdvantageInputError('cfg', 'must be an object');
  for (const k of Object.keys(cfg)) if (!CONFIG_KEYS.has(k)) throw new AdvantageInputError(`cfg.${k}`, 'unknown advantage config key');
  if (!ADVANTAGE_ESTIMATORS.includes(cfg.estimator))
    throw new AdvantageInputError('cfg.estimator', `must be one of ${ADVANTAGE_ESTIMATORS.join(', ')}, got ${String(cfg.estimator)}`);
  const stdEpsilon = cfg.stdEpsilon ?? 1e-6;
  if (!Number.isFinite(stdEpsilon) || stdEpsilon < 0)
    throw new AdvantageInputError('cfg.stdEpsilon', `must be finite and >= 0, got ${stdEpsilon}`);
  const processRewardWeight = cfg.processRewardWeight ?? 0;
  if (!Number.isFinite(processRewardWeight) || processRewardWeight < 0)
    throw new AdvantageInputError('cfg.processRewardWeight', `must be finite and >= 0, got ${processRewardWeight}`);
  const zeroVarianceTolerance = cfg.zeroVarianceTolerance ?? 1e-9;
  if (!Number.isFinite(zeroVarianceTolerance) || zeroVarianceTolerance < 0)
    throw new AdvantageInputError('cfg.zeroVarianceTolerance', `must be finite and >= 0, got ${zeroVarianceTolerance}`);
  if (cfg.baseline !== undefined && !(cfg.baseline instanceof RunningBaseline))
    throw new AdvantageInputError('cfg.baseline', 'must be a RunningBaseline');
  if (cfg.baseline && cfg.estimator === 'rloo')
    throw new AdvantageInputError('cfg.baseline', 'rloo uses the leave-one-out mean as its baseline; a running baseline would replace it');
  return {
    estimator: cfg.estimator,
    stdEpsilon,
    includeMaskedInStats: cfg.includeMaskedInStats ?? false,
    processRewardWeight,
    unbiasedStd: cfg.unbiasedStd ?? false,
    zeroVarianceTolerance,
    ...(cfg.baseline ? { baseline: cfg.baseline } : {}),
  };
}

function validateGroup(taskId: string, group: RolloutScore[], field: string): void {
  if (typeof taskId !== 'string' || taskId === '') throw new AdvantageInputError(`${field}.taskId`, 'must be a non-empty string');
  if (!Array.isArray(group) || group.length === 0) throw new AdvantageInputError(field, 'must be a non-empty group of rollouts');
  const ids = new Set<string>();
  const withProcess = group.filter((r) => r?.processRewards !== undefined).length;
  group.forEach((r, i) => {
    const f = `${field}[${i}]`;
    if (!r || typeof r !== 'object') throw new AdvantageInputError(f, 'must be an object');
    if (typeof r.rolloutId !== 'string' || r.rolloutId === '')
      throw new AdvantageInputError(`${f}.rolloutId`, 'must be a non-empty string');
    if (ids.has(r.rolloutId)) throw new AdvantageInputError(`${f}.rolloutId`, `duplicate rollout ${r.rolloutId}`);
    ids.add(r.rolloutId);
    if (typeof r.outcomeReward !== 'number' || !Number.isFinite(r.outcomeReward))
      throw new AdvantageInputError(`${f}.outcomeReward`, `is not a finite number (${String(r.outcomeReward)})`);
    if (r.masked !== undefined && typeof r.masked !== 'boolean') throw new AdvantageInputError(`${f}.masked`, 'must be a boolean');
    if (r.processRewards !== undefined) {
      if (!Array.isArray(r.processRewards)) throw new AdvantageInputError(`${f}.processRewards`, 'must be an array');
      r.processRewards.forEach((p, k) => {
        if (typeof p !== 'number' || !Number.isFinite(p))
          throw new AdvantageInputError(`${f}.processRewards[${k}]`, `is not finite (${String(p)})`);
      });
    } else if (withProcess > 0)
      throw new AdvantageInputError(`${f}.processRewards`, 'missing while other rollouts of the group carry process rewards');
  });
}

function meanStd(xs: number[], unbiased: boolean): { mean: number; std: number } {
  const n = xs.length;
  const mean = xs.reduce((a, b) => a + b, 0) / n;
  const ss = xs.reduce((a, b) => a + (b - mean) * (b - mean), 0);
  const denom = unbiased ? n - 1 : n;
  return { mean, std: denom > 0 ? Math.sqrt(ss / denom) : 0 };
}

interface Centred {
  inStats: boolean[];
  centred: number[]; // R − baseline (rloo: R − leave-one-out mean); 0 outside the statistics
  mean: number;
  groupStd: number;
  statsCount: number;
  zeroOutcome: boolean;
}

function centre(taskId: string, group: RolloutScore[], cfg: ReturnType<typeof validateConfig>): Centred {
  const inStats = group.map((r) => cfg.includeMaskedInStats || !r.masked);
  const stats = group.filter((_, i) => inStats[i]).map((r) => r.outcomeReward);
  const n = stats.length;
  if (n === 0) return { inStats, centred: group.map(() => 0), mean: 0, groupStd: 0, statsCount: 0, zeroOutcome: true };
  const { mean, std } = meanStd(stats, cfg.unbiasedStd);
  const zeroOutcome = Math.max(...stats) - Math.min(...stats) <= cfg.zeroVarianceTolerance;
  const base = cfg.baseline?.value(taskId) ?? mean;
  const sum = stats.reduce((a, b) => a + b, 0);
  const centred = group.map((r, i) => {
    if (!inStats[i] || zeroOutcome) return 0;
    if (cfg.estimator === 'rloo') return n > 1 ? r.outcomeReward - (sum - r.outcomeReward) / (n - 1) : 0;
    return r.outcomeReward - base;
  });
  return { inStats, centred, mean: cfg.estimator === 'rloo' ? mean : base, groupStd: std, statsCount: n, zeroOutcome };
}

/**
 * Process-reward rule: perCall[i][k] = perRollout[i] + λ · p̃_{i,k}, with a baseline per call
 * position: p̃_{i,k} = p_{i,k} − μ_k, μ_k the mean process reward of call k over the rollouts in the
 * statistics that made a k-th call (a call no other rollout has at its position gets p̃ = 0), and
 * under grpo and reinforce_pp divided by (σ + ε), σ the root mean square of every p̃ of the group.
 * Each call is credited for its own process reward against the same call of its group's other
 * rollouts; the outcome advantage is shared by all calls.
 *
 * Why per position: with one baseline over every call of the group, a kind of call that is right
 * less often than others (chain-add's tool calls against its answers) got a negative p̃ in every
 * group, so its tokens — the tool-call syntax every rollout writes — were pushed down everywhere;
 * at λ = 3 that collapsed held-out success from 35% to 6% in 60 steps.
 */
function processTerms(
  group: RolloutScore[],
  inStats: boolean[],
  cfg: ReturnType<typeof validateConfig>,
): { terms: number[][]; zero: boolean } {
  const terms = group.map((r) => (r.processRewards ?? []).map(() => 0));
  if (cfg.processRewardWeight === 0) return { terms, zero: true };
  const sums: number[] = [];
  const counts: number[] = [];
  group.forEach((r, i) => {
    if (!inStats[i]) return;
    (r.processRewards ?? []).forEach((p, k) => {
      sums[k] = (sums[k] ?? 0) + p;
      counts[k] = (counts[k] ?? 0) + 1;
    });
  });
  if (counts.length === 0) return { terms, zero: true };
  const centred = group.map((r, i) =>
    inStats[i] ? (r.processRewards ?? []).map((p, k) => (counts[k] > 1 ? p - sums[k] / counts[k] : 0)) : [],
  );
  const all = centred.flat();
  if (all.every((x) => Math.abs(x) <= cfg.zeroVarianceTolerance)) return { terms, zero: true };
  const n = cfg.unbiasedStd ? Math.max(1, all.length - 1) : all.length;
  const rms = Math.sqrt(all.reduce((a, x) => a + x * x, 0) / n);
  const divide = cfg.estimator === 'grpo' || cfg.estimator === 'reinforce_pp';
  group.forEach((_, i) => {
    if (!inStats[i]) return;
    terms[i] = centred[i].map((x) => (cfg.processRewardWeight * x) / (divide ? rms + cfg.stdEpsilon : 1));
  });
  return { terms, zero: false };
}

function finish(group: RolloutScore[], c: Centred, divisor: number, cfg: ReturnType<typeof validateConfig>, std: number): GroupAdvantages {
  const perRollout = c.centred.map((x) => x / divisor);
  const hasProcess = group.some((r) => r.processRewards !== undefined);
  let zeroVariance = c.zeroOutcome;
  const out: GroupAdvantages = { perRollout, zeroVariance, mean: c.mean, std, statsCount: c.statsCount };
  if (hasProcess) {
    const p = processTerms(group, c.inStats, cfg);
    zeroVariance = c.zeroOutcome && p.zero;
    out.perCall = group.map((r, i) => (r.processRewards ?? []).map((_, k) => perRollout[i] + p.terms[i][k]));
    out.zeroVariance = zeroVariance;
  }
  return out;
}

/**
 * Advantages of one group (the G rollouts of one task):
 *   grpo          (R − mean)/(std + ε)
 *   dr_grpo       R − mean
 *   rloo          R_i − mean_{j≠i} R_j
 *   reinforce_pp  (R − mean)/(std + ε) with the BATCH std: this group's centred rewards and
 *                 `opts.batchPeers`, the centred rewards of the batch's other groups (a service that
 *                 settles one group at a time passes those of the groups settled just before it);
 *                 with neither peers nor computeBatchAdvantages the batch is this group alone
 * With a running baseline, its value for the task (when it has one) replaces the mean, and it is
 * updated with this group's statistics rewards afterwards. A group whose statistics rewards are
 * all equal gets zeros (and zeroVariance) even with a baseline.
 */
export function computeGroupAdvantages(
  taskId: string,
  group: RolloutScore[],
  cfg: AdvantageConfig,
  opts: BatchOptions = {},
): GroupAdvantages {
  return computeBatchAdvantages([{ taskId, rollouts: group }], cfg, opts)[0];
}

export interface BatchOptions {
  /** reinforce_pp: centred rewards (R − its group's mean) of other groups of the batch, counted in the batch std; ignored by the other estimators. */
  batchPeers?: readonly number[];
}

/** Advantages of several groups; reinforce_pp divides by the std of every centred reward in the batch. */
export function computeBatchAdvantages(
  groups: { taskId: string; rollouts: RolloutScore[] }[],
  cfg: AdvantageConfig,
  opts: BatchOptions = {},
): GroupAdvantages[] {
  const c = validateConfig(cfg);
  const peers = opts.batchPeers ?? [];
  if (!Array.isArray(peers)) throw new AdvantageInputError('opts.batchPeers', 'must be an array');
  peers.forEach((p, i) => {
    if (typeof p !== 'number' || !Number.isFinite(p))
      throw new AdvantageInputError(`opts.batchPeers[${i}]`, `is not finite (${String(p)})`);
  });
  if (!Array.isArray(groups) || groups.length === 0) throw new AdvantageInputError('groups', 'must be a non-empty array');
  groups.forEach((g, i) => validateGroup(g?.taskId, g?.rollouts, `groups[${i}].rollouts`));
  const centred = groups.map((g) => centre(g.taskId, g.rollouts, c));
  let batchStd = 0;
  if (c.estimator === 'reinforce_pp') {
    const all: number[] = [];
    centred.forEach((x) => x.centred.forEach((v, i) => x.inStats[i] && all.push(v)));
    all.push(...peers);
    // the centred rewards have mean 0 per group; whitening divides by their spread around 0
    batchStd =
      all.length > 0 ? Math.sqrt(all.reduce((a, b) => a + b * b, 0) / Math.max(1, c.unbiasedStd ? all.length - 1 : all.length)) : 0;
  }
  const out = groups.map((g, i) => {
    const x = centred[i];
    switch (c.estimator) {
      case 'grpo':
        return finish(g.rollouts, x, x.groupStd + c.stdEpsilon, c, x.groupStd);
      case 'reinforce_pp':
        return finish(g.rollouts, x, batchStd + c.stdEpsilon, c, batchStd);
      default:
        return finish(g.rollouts, x, 1, c, 0);
    }
  });
  if (c.baseline)
    groups.forEach((g, i) => {
      const rewards = g.rollouts.filter((_, k) => centred[i].inStats[k]).map((r) => r.outcomeReward);
      if (rewards.length > 0) c.baseline?.update(g.taskId, rewards);
    });
  return out;
}
