/**
 * The e2e bench's figures, from what each run of the real embedded loop recorded (tools/bench/suites/e2e.ts).
 * Pure functions, so the arithmetic is tested apart from the hour of runs.
 *
 * Time is the run's train clock: seconds since the trainer started, with the evaluations inside the
 * run taken out (an evaluation holds the trainer and gates new train rollouts; runs that reach more
 * evaluation points would otherwise lose training time to them). Every run of the bench has the
 * same train-clock budget, so "at equal wall clock" is at the end of that budget.
 */

export interface RunRecord {
  label: string;
  mode: 'sync' | 'async';
  loss: 'cispo' | 'ppo';
  seed: number;
  /** Train-clock seconds the run trained for. */
  trainSeconds: number;
  /** Train rollouts that finished within them. */
  rolloutsCompleted: number;
  /** The trainer's busy seconds (training, checkpointing, publishing) within them. */
  trainerBusySeconds: number;
  /**
   * Seconds within them the next train group waited at the head of the rollout queue, by what held
   * it: the staleness controller's capacity ((η + 1)·B groups) or version bound, or all N slots running.
   */
  admissionBlockedSeconds: { capacity: number; version: number; slots: number };
  /** Mean groups holding the staleness capacity within them: running, finished but untrained, trained into a version not serving yet. */
  capacityHeld: { running: number; untrained: number; awaitingVersion: number };
  /** Trained batches: the version each produced, when (train clock), their sample and unique tokens. */
  steps: { version: number; trainS: number; totalTokens: number; uniqueTokens: number; skipped: boolean }[];
  /** Every train rollout's outcome reward and when it finished (train clock), in order. */
  rewards: [number, number][];
  /** Held-out evaluations: the version each was pinned to, its success rate and mean (partial-credit) reward. */
  evals: { version: number; trainS: number; success: number; meanReward: number }[];
  /** Output tokens trained per lag (index = versions behind the trainer's version at the step). */
  staleness: number[];
  rlStoppedBy: string;
}

/** A time on the run's clock as train-clock seconds: since the trainer started, evaluations taken out. */
export function trainClock(t: number, trainStartedAtS: number, evalIntervals: readonly [number, number][]): number {
  let s = t - trainStartedAtS;
  for (const [a, b] of evalIntervals) {
    const from = Math.max(a, trainStartedAtS);
    if (b <= from) continue;
    s -= Math.max(0, Math.min(b, t) - from);
  }
  return Math.max(0, s);
}

const mean = (xs: readonly number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);

export interface Throughput {
  /** Train rollouts finished per second (trajectories generated). */
  trajectoriesPerS: number;
  /** Trajectories in trained batches per second (groupsPerBatch x groupSize a batch). */
  trainedTrajectoriesPerS: number;
  /** Tokens of the trained samples per second (prompt + output, as unmerged training would see them). */
  trainedTokensPerS: number;
  /** Tokens the trainer computed per second (the prefix tree's unique tokens). */
  uniqueTokensPerS: number;
  /** Share of the train clock the trainer had no batch to train. */
  trainerIdle: number;
  steps: number;
}

export function throughput(r: RunRecord, trajectoriesPerBatch: number): Throughput {
  const trained = r.steps.filter((s) => !s.skipped);
  const T = Math.max(1e-9, r.trainSeconds);
  return {
    trajectoriesPerS: r.rolloutsCompleted / T,
    trainedTrajectoriesPerS: (trained.length * trajectoriesPerBatch) / T,
    trainedTokensPerS: trained.reduce((a, s) => a + s.totalTokens, 0) / T,
    uniqueTokensPerS: trained.reduce((a, s) => a + s.uniqueTokens, 0) / T,
    trainerIdle: Math.min(1, Math.max(0, 1 - r.trainerBusySeconds / T)),
    steps: trained.length,
  };
}

/**
 * Mean outcome reward of the last `share` of the train rollouts that finished by train-clock `by`
 * (by count: a synchronous run finishes its rollouts in bursts, one step's at a time, so a window of
 * time may hold none); NaN when none did.
 */
export function rewardOfLast(r: RunRecord, share: number, by: number): number {
  const done = r.rewards.filter(([t]) => t <= by);
  return mean(done.slice(done.length - Math.max(1, Math.ceil(done.length * share))).map(([, x]) => x));
}

/** Whether wall time t falls inside one of the evaluations (their rollouts run, new train rollouts wait). */
export function duringEvaluation(t: number, evalIntervals: readonly [number, number][]): boolean {
  return evalIntervals.some(([a, b]) => t > a && t < b);
}

/** Held-out success of the evaluation pinned to `version`, or null when the run has none there. */
export function heldOutAt(r: RunRecord, version: number): number | null {
  return r.evals.find((e) => e.version === version)?.success ?? null;
}

/** The last evaluation: the policy the run ended with, at the end of its train-clock budget. */
export function heldOutFinal(r: RunRecord): { version: number; success: number; meanReward: number } | null {
  const e = r.evals[r.evals.length - 1];
  return e ? { version: e.version, success: e.success, meanReward: e.meanReward } : null;
}

/**
 * The largest version every run evaluated (a multiple of the evaluation interval all of them
 * reached), where runs compare at equal steps; null when they share none but version 0.
 */
export function commonEvalVersion(runs: readonly RunRecord[]): number | null {
  if (runs.length === 0) return null;
  const sets = runs.map((r) => new Set(r.evals.map((e) => e.version)));
  const shared = [...sets[0]].filter((v) => v > 0 && sets.every((s) => s.has(v)));
  return shared.length ? Math.max(...shared) : null;
}

/**
 * Mean of paired differences a − b (one pair per seed) and its standard error (sample standard
 * deviation / √n; NaN with fewer than two pairs). Runs of one seed share the warm start and the
 * evaluation tasks, so the paired spread is what says whether a gap between two losses is noise.
 */
export function pairedDifference(pairs: readonly (readonly [number, number])[]): { n: number; mean: number; se: number } {
  const d = pairs.map(([a, b]) => a - b);
  const m = mean(d);
  if (d.length < 2) return { n: d.length, mean: m, se: NaN };
  const variance = d.reduce((acc, x) => acc + (x - m) ** 2, 0) / (d.length - 1);
  return { n: d.length, mean: m, se: Math.sqrt(variance / d.length) };
}

export interface LagDistribution {
  tokens: number;
  /** Share of output tokens per lag in versions: 0, 1, 2, 3 or more. */
  shares: [number, number, number, number];
  mean: number;
  max: number;
  /** Share of tokens generated by an older version than the one they were trained against (lag >= 1). */
  staleShare: number;
}

/** The lag distribution of the trained output tokens, pooled over runs. */
export function lagDistribution(runs: readonly RunRecord[]): LagDistribution {
  const h: number[] = [];
  for (const r of runs) r.staleness.forEach((n, lag) => (h[lag] = (h[lag] ?? 0) + (n ?? 0)));
  const tokens = h.reduce((a, n) => a + (n ?? 0), 0);
  const at = (lag: number) => (h[lag] ?? 0) / Math.max(1, tokens);
  const rest = h.slice(3).reduce((a, n) => a + (n ?? 0), 0) / Math.max(1, tokens);
  const max = h.reduce((m, n, lag) => ((n ?? 0) > 0 ? lag : m), 0);
  return {
    tokens,
    shares: [at(0), at(1), at(2), rest],
    mean: h.reduce((a, n, lag) => a + (n ?? 0) * lag, 0) / Math.max(1, tokens),
    max,
    staleShare: tokens ? 1 - at(0) : 0,
  };
}

export { mean };
