/**
 * What the driver tells a user when a run cannot learn: it counts how rollouts end, keeps the
 * first failure in full (a black-box agent's carries its exit status and the tail of its stderr),
 * and names the cause of a stall with what to try. A run whose rollouts all fail stops early
 * instead of burning its budget on them.
 */
import type { CompletedRollout } from './services';

export type StallCause = 'rollouts-failing' | 'zero-variance' | 'none-finished' | 'nothing-admitted' | 'unknown';

export interface RunFailure {
  cause: StallCause;
  /** What went wrong, in a sentence or two, with the counts. */
  message: string;
  /** What to try. */
  advice: string;
  /** The first failed rollout's error in full, when one failed. */
  firstError: string | null;
}

/** The share of finished groups scoring alike past which a stall is put down to zero variance. */
const ZERO_VARIANCE_SHARE = 0.9;

/** Rollouts that must all have failed (and none succeeded) before the run gives up early: two groups' worth, at least 8. */
export const allFailedThreshold = (groupSize: number) => Math.max(8, 2 * groupSize);

export class RolloutFailures {
  readonly finishes = new Map<string, number>();
  private firstError: { rolloutId: string; purpose: string; error: string } | null = null;
  private failedSinceLastSuccess = 0;
  private anySucceeded = false;
  /** Train rewards by group: a group whose rollouts all scored the same is dropped (zero variance). */
  private readonly groupRewards = new Map<string, number[]>();
  private completedTrain = 0;

  constructor(private readonly groupSize: number) {}

  record(r: CompletedRollout): void {
    this.finishes.set(`${r.purpose}:${r.finishReason}`, (this.finishes.get(`${r.purpose}:${r.finishReason}`) ?? 0) + 1);
    if (r.finishReason === 'env_error') {
      this.failedSinceLastSuccess++;
      if (!this.firstError) this.firstError = { rolloutId: r.rolloutId, purpose: r.purpose, error: r.error ?? '(no error text)' };
    } else if (r.finishReason !== 'aborted') {
      this.anySucceeded = true;
      this.failedSinceLastSuccess = 0;
    }
    if (r.purpose === 'train') {
      this.completedTrain++;
      if (r.outcomeReward !== null) {
        const rewards = this.groupRewards.get(r.groupId) ?? [];
        rewards.push(r.outcomeReward);
        this.groupRewards.set(r.groupId, rewards);
      }
    }
  }

  /** Every rollout so far failed, and enough of them to be sure (the run should stop now). */
  allFailed(): RunFailure | null {
    if (this.anySucceeded || this.failedSinceLastSuccess < allFailedThreshold(this.groupSize)) return null;
    return {
      cause: 'rollouts-failing',
      message: `every rollout so far failed (${this.failedSinceLastSuccess} of ${this.failedSinceLastSuccess} ended in env_error: the agent, its calls to the gateway or the verifier failed), so there is nothing to train on`,
      advice: ROLLOUT_FAILURE_ADVICE,
      firstError: this.describeFirstError(),
    };
  }

  /** Why no train batch came for a while: the rollouts fail, every group scores the same, none finish, or none start. */
  diagnoseStall(state: { running: number; queuedGroups: number }): RunFailure {
    const count = (reason: string) => this.finishes.get(`train:${reason}`) ?? 0;
    const failed = count('env_error');
    const summary = `${this.completedTrain} train rollouts finished (${this.finishSummary()}), ${state.running} running, ${state.queuedGroups} groups queued`;
    if (this.completedTrain > 0 && failed > this.completedTrain / 2)
      return {
        cause: 'rollouts-failing',
        message: `most train rollouts end in env_error (the agent, its gateway calls or the verifier failing): ${summary}`,
        advice: ROLLOUT_FAILURE_ADVICE,
        firstError: this.describeFirstError(),
      };
    const complete = [...this.groupRewards.values()].filter((r) => r.length >= this.groupSize);
    const flat = complete.filter((r) => r.every((x) => x === r[0]));
    // Nearly every group scoring alike starves the batches as surely as all of them: a batch needs
    // scheduler.groupsPerBatch groups with a signal.
    if (complete.length > 0 && flat.length >= ZERO_VARIANCE_SHARE * complete.length) {
      const levels = [...new Set(flat.map((r) => r[0]))].sort((a, b) => a - b);
      const allZero = levels.every((l) => l <= 0);
      const shown = levels.length > 6 ? [...levels.slice(0, 3), NaN, ...levels.slice(-2)] : levels;
      return {
        cause: 'zero-variance',
        message: `${flat.length === complete.length ? 'every' : `${flat.length} of ${complete.length}`} finished group${flat.length === 1 ? '' : 's'} got equal rewards (rewards ${shown.map((l) => (Number.isNaN(l) ? '...' : l.toFixed(2))).join(', ')}): such groups carry no signal and are dropped: ${summary}`,
        advice: allZero
          ? 'the model solves none of these tasks: give easier tasks (chain-add: task.kMax, task.maxOperand), a warm start (warmStart.enabled), more room to answer (rollouts.maxTokensPerCall, task.limits.maxSteps), a higher rollouts.temperature, or check the verifier against a known-good answer'
          : 'the model scores every sample of a task alike: give harder or more varied tasks, a larger rollouts.groupSize, a higher rollouts.temperature, a verifier with partial credit, or set scheduler.dropZeroVariance false to train on them anyway',
        firstError: null,
      };
    }
    if (this.completedTrain === 0 && state.running > 0)
      return {
        cause: 'none-finished',
        message: `rollouts are running but none finished: ${summary}`,
        advice:
          'an agent that never ends (it waits for input, or loops) runs until task.limits.timeoutMs (600 s by default): lower it, check task.agent.taskInput, and run the agent by hand against the gateway',
        firstError: this.describeFirstError(),
      };
    if (this.completedTrain === 0)
      return {
        cause: 'nothing-admitted',
        message: `no train rollout started: ${summary}`,
        advice:
          "the rollout-manager admits a group only while the staleness bound allows (rollouts.eta, scheduler.groupsPerBatch); with a task JSONL check that it has lines of split train; in a stack run read the rollout-manager's log",
        firstError: this.describeFirstError(),
      };
    return {
      cause: 'unknown',
      message: `no train batch although rollouts finish: ${summary}`,
      advice:
        'groups are still filling (rollouts.groupSize rollouts each) or the Data Pool drops them (filters: truncated, timed-out and failed rollouts are kept for statistics but not trained); look at the report and the Data Pool log',
      firstError: this.describeFirstError(),
    };
  }

  /** 'env_error 12, stop 30' over train rollouts. */
  finishSummary(): string {
    const parts = [...this.finishes].filter(([k]) => k.startsWith('train:')).map(([k, n]) => `${k.slice(6)} ${n}`);
    return parts.length ? parts.join(', ') : 'none';
  }

  private describeFirstError(): string | null {
    if (!this.firstError) return null;
    return `rollout ${this.firstError.rolloutId} (${this.firstError.purpose}):\n${this.firstError.error}`;
  }
}

const ROLLOUT_FAILURE_ADVICE =
  "read the first error below (a black-box agent's exit status and the end of its stderr); run the agent by hand with the same command: it gets the task on stdin and OPENAI_BASE_URL / OPENAI_API_KEY of its gateway session, whose /v1/chat/completions, /v1/completions and /v1/models it may call (a 404 means another path or a wrong base URL); a verifier error names the verifier";

/** The lines a command prints for a run that could not learn. */
export function describeFailure(f: RunFailure): string {
  const lines = [`${f.message}.`, `what to try: ${f.advice}.`];
  if (f.firstError) lines.push('', 'the first failed rollout, in full:', f.firstError.trimEnd());
  return lines.join('\n');
}
