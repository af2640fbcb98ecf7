/**
 * What a run leaves behind, accumulated from what the services report: the trainer's steps, the
 * train rollouts' rewards, the pinned evaluations. It fills the embedded job's report rows
 * (rl-report.ts StepRow / EvalRow) and its JSON summary, field for field, so a
 * distributed run and an embedded one are read the same way.
 */
import type { EvaluationCompletedV1 } from '@anvil/contracts';
import type { TrainerStepEvent } from '@anvil/trainer';
import type { EvalRow, StepRow } from './rl-report';

/** JSON has no NaN: the trainer's NaN (a skipped step's loss, a ratio with no tokens) arrives as null. */
const num = (v: number | null | undefined): number => (typeof v === 'number' ? v : NaN);

export class RunRecorder {
  readonly steps: StepRow[] = [];
  readonly evals: EvalRow[] = [];
  readonly staleness: number[] = [];
  readonly rolloutTimeline: Array<[number, number]> = [];
  completedTrain = 0;
  private rewardWindow: number[] = [];
  private readonly mismatchSplits = new Map<string, { abs: number; kl: number; tokens: number }>();

  /** A train rollout finished (eval rollouts are never trained on and are not counted here). */
  trainRolloutCompleted(outcomeReward: number | null, wallS: number): void {
    this.completedTrain++;
    this.rolloutTimeline.push([wallS, this.completedTrain]);
    if (outcomeReward !== null) this.rewardWindow.push(outcomeReward);
  }

  /**
   * One trained batch; the reward is the mean of the train rollouts finished since the previous one.
   * A batch trained in mini-batches has one report per optimizer step: the row carries their means
   * (over the applied steps, or all of them when none was applied), the token-weighted mismatch
   * (only mini-batches trained on the current version's weights measure it), and the batch counts
   * as skipped only when no step was applied.
   */
  step(e: TrainerStepEvent, wallS: number): StepRow {
    const rewards = this.rewardWindow;
    this.rewardWindow = [];
    const applied = e.reports.filter((x) => x.skipped === null);
    const over = applied.length > 0 ? applied : e.reports;
    const meanOf = (pick: (x: TrainerStepEvent['reports'][number]) => number | null | undefined): number => {
      const v = over.map((x) => num(pick(x))).filter(Number.isFinite);
      return v.length ? v.reduce((a, b) => a + b, 0) / v.length : NaN;
    };
    const withStats = over.filter((x) => x.stats);
    const mismatchTokens = e.reports.reduce((a, x) => a + x.mismatch.tokens, 0);
    const tokenMean = (pick: (x: TrainerStepEvent['reports'][number]) => number) =>
      mismatchTokens > 0
        ? e.reports.reduce((a, x) => a + (x.mismatch.tokens > 0 ? num(pick(x)) * x.mismatch.tokens : 0), 0) / mismatchTokens
        : NaN;
    const uniqueTokens = e.reports.reduce((a, x) => a + x.uniqueTokens, 0);
    const totalTokens = e.reports.reduce((a, x) => a + x.totalTokens, 0);
    const row: StepRow = {
      step: this.steps.length + 1,
      version: e.version,
      wallS,
      reward: rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null,
      loss: meanOf((x) => x.loss),
      gradNorm: meanOf((x) => x.gradNorm),
      ratioMean: meanOf((x) => x.stats?.ratioMean),
      clipHighFrac: meanOf((x) => x.stats?.clipHighFrac),
      entropy: withStats.some((x) => x.stats?.entropyMean !== undefined) ? meanOf((x) => x.stats?.entropyMean) : null,
      klRef: withStats.some((x) => x.stats?.klRefK3 !== undefined) ? meanOf((x) => x.stats?.klRefK3) : null,
      mismatchAbs: tokenMean((x) => x.mismatch.meanAbsDeltaLogp),
      mismatchKl: tokenMean((x) => x.mismatch.klK3),
      mismatchTokens,
      sharing: totalTokens > 0 ? 1 - uniqueTokens / totalTokens : NaN,
      uniqueTokens,
      totalTokens,
      trainSeconds: e.busyMs / 1000,
      idleSeconds: e.idleMs / 1000,
      stalenessMean: num(e.staleness.mean),
      stalenessMax: num(e.staleness.max),
      skipped: applied.length > 0 ? null : e.reports.map((x) => x.skipped).join('; ') || 'no optimizer step',
    };
    this.steps.push(row);
    for (const x of e.reports) {
      for (const sp of x.mismatchBySplit) {
        const m = this.mismatchSplits.get(sp.key) ?? { abs: 0, kl: 0, tokens: 0 };
        m.abs += num(sp.meanAbsDeltaLogp) * sp.tokens;
        m.kl += num(sp.klK3) * sp.tokens;
        m.tokens += sp.tokens;
        this.mismatchSplits.set(sp.key, m);
      }
    }
    for (const [lag, n] of e.stalenessHistogram.entries()) this.staleness[lag] = (this.staleness[lag] ?? 0) + n;
    return row;
  }

  evaluated(r: EvaluationCompletedV1, wallS: number): EvalRow {
    const row: EvalRow = {
      version: r.policyVersion,
      step: this.steps.length,
      wallS,
      success: r.successRate,
      meanReward: r.meanReward,
      tasks: r.results.length,
      versionDrift: r.versionDrift,
    };
    this.evals.push(row);
    return row;
  }

  mismatchBySplit() {
    return [...this.mismatchSplits.entries()].map(([key, m]) => ({
      key,
      meanAbsDeltaLogp: m.abs / Math.max(1, m.tokens),
      klK3: m.kl / Math.max(1, m.tokens),
      tokens: m.tokens,
    }));
  }

  /** The summary fields of a run (what `anvil train` prints last and writes to summary.json). */
  summary(o: {
    seed: number;
    wallClockSeconds: number;
    finalVersion: number;
    rlStoppedBy: string;
    warmStart: Record<string, unknown>;
    finalEvalPinnedTo: number | null;
  }): Record<string, unknown> {
    // A user's task set without held-out tasks has no evaluation: held-out success is null, not made up.
    const warm = this.evals[0] as EvalRow | undefined;
    const last = this.evals[this.evals.length - 1] as EvalRow | undefined;
    const trained = this.steps.filter((s) => !s.skipped);
    const splits = this.mismatchBySplit();
    const mismatchTokens = splits.reduce((a, s) => a + s.tokens, 0);
    const busy = trained.reduce((a, s) => a + s.idleSeconds + s.trainSeconds, 0);
    return {
      heldOutSuccess: warm && last ? { warmStart: warm.success, final: last.success } : null,
      heldOutGainPoints: warm && last ? Number(((last.success - warm.success) * 100).toFixed(1)) : null,
      seed: o.seed,
      wallClockSeconds: Number(o.wallClockSeconds.toFixed(1)),
      warmStart: o.warmStart,
      rlSteps: trained.length,
      rlStoppedBy: o.rlStoppedBy,
      finalVersion: o.finalVersion,
      trainRollouts: this.completedTrain,
      evaluations: this.evals.length,
      meanSharing: trained.reduce((a, s) => a + s.sharing, 0) / Math.max(1, trained.length),
      trainerIdleFraction: trained.reduce((a, s) => a + s.idleSeconds, 0) / Math.max(1e-9, busy),
      meanStalenessVersions: trained.reduce((a, s) => a + s.stalenessMean, 0) / Math.max(1, trained.length),
      mismatch: {
        meanAbsDeltaLogp: splits.reduce((a, s) => a + s.meanAbsDeltaLogp * s.tokens, 0) / Math.max(1, mismatchTokens),
        klK3: splits.reduce((a, s) => a + s.klK3 * s.tokens, 0) / Math.max(1, mismatchTokens),
        tokens: mismatchTokens,
      },
      skippedSteps: this.steps.length - trained.length,
      evalVersionDrift: this.evals.reduce((a, e) => a + e.versionDrift, 0),
      finalEvalPinnedTo: o.finalEvalPinnedTo,
    };
  }
}
