/**
 * The one run driver, shared by `anvil train` (in process), `anvil stack up` (distributed) and the
 * e2e bench: load the task set into the rollout-manager, evaluate the starting weights pinned to
 * version 0, train asynchronously (train groups queued a pass over the train split at a time and
 * topped up while the trainer needs them), evaluate every K versions with the trainer held at
 * exactly that version, stop at the step budget, the wall-clock cap, a stall or when every rollout
 * fails, evaluate the final version. It talks to the services only through the RunServices port;
 * what happened is in the RunRecorder it returns, and the caller writes the report and summary.
 */
import { taskSetSpecSchema, type TaskSetSpec } from '@anvil/rollout-manager';
import { trainPass, type RunConfig } from '../config/run-config';
import { Progress } from '../report/progress';
import { RunRecorder } from '../report/run-recorder';
import { RolloutFailures, type RunFailure } from './failures';
import type { CompletedRollout, RolloutState, RunServices } from './services';
import type { RlTaskSet } from './task-set';

export interface RunDriverOptions {
  cfg: RunConfig;
  runId: string;
  services: RunServices;
  taskSet: RlTaskSet;
  /** The clock of the rows (seconds): the report plots against it. */
  wall: () => number;
  log: (line: string) => void;
  /** The live progress line (default true). */
  progress?: boolean;
  /** Evaluate the starting weights before step 1 (default true). */
  initialEval?: boolean;
  /** What the starting weights are called in the log (default 'the warm start'). */
  startName?: string;
  /**
   * budget.seconds counts training time only, not the evaluations inside the loop (default false:
   * the wall clock of the whole phase). Runs compared at equal wall clock need it, or a run that
   * reaches more evaluation points loses training time to them.
   */
  budgetExcludesEvals?: boolean;
  /** Set when the run is being stopped (Ctrl-C, `anvil stack down`): the loop ends at its next tick. */
  signal?: AbortSignal;
  onRolloutCompleted?: (r: CompletedRollout, wallS: number) => void;
}

/** Why RL ended: its budget, a stall (no batch for budget.stallSeconds), or every rollout failing. */
export type RlStoppedBy = 'steps' | 'seconds' | 'stall' | 'rollouts-failed';

export interface RunDriverResult {
  rec: RunRecorder;
  spec: TaskSetSpec;
  rlStoppedBy: RlStoppedBy;
  /** Why the run could not learn (a stall or failing rollouts), with what to try; null when it ran its budget. */
  failure: RunFailure | null;
  finalVersion: number;
  /** The version the last evaluation was pinned to (null: the task set has no held-out tasks). */
  finalEvalPinnedTo: number | null;
  /** The wall clock when the phase ended. */
  endedAtS: number;
  /** Seconds from the trainer's start to the end of the loop, without the evaluations inside it. */
  trainSeconds: number;
  /** Seconds the evaluations inside the loop took (the starting and final ones aside). */
  evalSeconds: number;
  /** When each evaluation ran, [start, end] on the wall clock (the starting and final ones included). */
  evalIntervals: [number, number][];
  /** The wall clock when the trainer started (RL time begins) and when the loop ended (before the final evaluation). */
  trainStartedAtS: number;
  loopEndedAtS: number;
  /** Train rollouts finished within trainSeconds. */
  trainRolloutsInLoop: number;
  /** The trainer's busy time (training, checkpointing, publishing) over the loop. */
  trainerBusySeconds: number;
  /** Over the loop: seconds a train group waited at the head of the rollout queue, by what held it. */
  admissionBlockedSeconds: { capacity: number; version: number; slots: number };
  /** Over the loop (sampled every 200 ms, evaluations aside): mean groups holding the staleness capacity, by state. */
  capacityHeld: { running: number; untrained: number; awaitingVersion: number };
  tasks: { train: number; eval: number };
}

export class RunStopped extends Error {
  override name = 'RunStopped';
}

const TICK_MS = 200;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function driveRun(o: RunDriverOptions): Promise<RunDriverResult> {
  return new RunDriver(o).run();
}

/** What the training loop measured between the trainer's start and the end of the budget. */
interface LoopOutcome {
  rlStoppedBy: RlStoppedBy;
  failure: RunFailure | null;
  trainSeconds: number;
  trainStartedAtS: number;
  loopEndedAtS: number;
  trainRolloutsInLoop: number;
  trainerBusySeconds: number;
  admissionBlockedSeconds: RunDriverResult['admissionBlockedSeconds'];
  capacityHeld: RunDriverResult['capacityHeld'];
}

/** Mean groups holding the staleness capacity over the loop, by state (sampled each tick). */
class CapacitySampler {
  private readonly sum = { samples: 0, running: 0, untrained: 0, awaitingVersion: 0 };

  add(st: RolloutState): void {
    this.sum.samples++;
    this.sum.running += st.staleness.inFlight.length;
    this.sum.untrained += st.staleness.untrained.length;
    this.sum.awaitingVersion += st.staleness.awaitingVersion.length;
  }

  means(): RunDriverResult['capacityHeld'] {
    const n = Math.max(1, this.sum.samples);
    return { running: this.sum.running / n, untrained: this.sum.untrained / n, awaitingVersion: this.sum.awaitingVersion / n };
  }
}

/**
 * Queues train groups a pass over the train split at a time and tops them up while the trainer
 * needs them: the Data Pool drops zero-variance groups (often a third of them), so no fixed count is
 * enough. A pass takes seconds to submit over HTTP: it runs beside the loop.
 */
class TrainSubmissions {
  private passes = 0;
  private submitting: Promise<void> | null = null;
  private error: Error | null = null;

  constructor(
    private readonly services: RunServices,
    private readonly cfg: RunConfig,
    private readonly taskSetId: string,
  ) {}

  topUp(queuedGroups: number): void {
    if (this.error) throw this.error;
    if (this.submitting || queuedGroups >= 2 * this.cfg.scheduler.groupsPerBatch) return;
    this.submitting = this.services
      .submit(trainPass(this.cfg, this.taskSetId, this.passes++))
      .catch((e: Error) => void (this.error = e))
      .finally(() => (this.submitting = null));
  }

  settled(): Promise<void> {
    return this.submitting ?? Promise.resolve();
  }
}

class RunDriver {
  private readonly cfg: RunConfig;
  private readonly services: RunServices;
  private readonly spec: TaskSetSpec;
  private readonly rec = new RunRecorder();
  private readonly failures: RolloutFailures;
  private readonly progress: Progress;
  private readonly startedEpochMs: number;
  private readonly showProgress: boolean;
  private lastStepAt = performance.now();
  private evaluations = true;
  private lastEval = 0;
  private evalSeconds = 0;
  private readonly evalIntervals: [number, number][] = [];
  /** The progress line's view of the rollout-manager (read from a timer, refreshed each tick). */
  private rolloutLine = '';

  constructor(private readonly o: RunDriverOptions) {
    this.cfg = o.cfg;
    this.services = o.services;
    this.spec = taskSetSpecSchema.parse(o.taskSet.spec);
    this.failures = new RolloutFailures(o.cfg.rollouts.groupSize);
    this.progress = new Progress(o.cfg.budget.steps, () => this.rolloutLine);
    this.startedEpochMs = Date.now() - o.wall() * 1000;
    this.showProgress = o.progress ?? true;
  }

  async run(): Promise<RunDriverResult> {
    this.listen();
    try {
      const tasks = await this.o.taskSet.load(this.services.tasks);
      this.evaluations = tasks.eval > 0;
      if (!this.evaluations)
        this.o.log('note: the task set has no held-out tasks (no line of split eval): no evaluations, held-out success is not measured');
      const failed = await this.evaluateStart(tasks);
      if (failed) return await this.stopEarly(failed, tasks);
      this.checkStopped();
      const loop = await this.trainLoop();
      const finalVersion = await this.finish(loop);
      const last = this.rec.evals[this.rec.evals.length - 1];
      return {
        ...loop,
        rec: this.rec,
        spec: this.spec,
        finalVersion,
        finalEvalPinnedTo: last?.version ?? null,
        endedAtS: this.o.wall(),
        evalSeconds: this.evalSeconds,
        evalIntervals: this.evalIntervals,
        tasks,
      };
    } finally {
      this.progress.stop();
    }
  }

  /** Train steps feed the recorder and the progress line; rollouts the failure tracker. */
  private listen(): void {
    const { cfg, services, rec } = this;
    services.onStep((e, atMs) => {
      this.lastStepAt = performance.now();
      const row = rec.step(e, (atMs - this.startedEpochMs) / 1000);
      this.progress.step({
        step: row.step,
        version: e.version,
        reward: row.reward,
        staleness: e.staleness.mean,
        tokensPerSec: row.uniqueTokens / Math.max(1e-9, e.busyMs / 1000),
        wallS: row.wallS,
      });
      // Hold the trainer at an evaluation point before it takes the next batch, so each evaluation
      // is pinned to exactly every K-th version (the loop runs it).
      if (this.evaluations && e.version - this.lastEval >= cfg.eval.everyVersions) void services.pauseTraining().catch(() => undefined);
    });
    services.onRolloutCompleted((r) => {
      this.failures.record(r);
      if (r.purpose !== 'train') return;
      rec.trainRolloutCompleted(r.outcomeReward, this.o.wall());
      this.o.onRolloutCompleted?.(r, this.o.wall());
    });
  }

  /** A held-out evaluation pinned to the version the trainer holds. */
  private async evaluate(label: string, keepPaused = false) {
    const { cfg, services, o } = this;
    const from = o.wall();
    const version = await services.pauseTraining();
    const t0 = performance.now();
    const r = await services.evaluate({
      taskSetId: o.taskSet.evalTaskSetId ?? this.spec.id,
      version,
      samplesPerTask: cfg.eval.samplesPerTask,
      temperature: cfg.eval.temperature,
      evalId: `${o.runId}-${label}`,
    });
    this.rec.evaluated(r, o.wall());
    const seconds = (performance.now() - t0) / 1000;
    if (this.showProgress) this.progress.evaluated(version, r.successRate, seconds);
    else o.log(`held-out success ${(r.successRate * 100).toFixed(1)}% at policy version ${version} (evaluation ${seconds.toFixed(1)} s)`);
    if (!keepPaused) await services.resumeTraining();
    this.evalIntervals.push([from, o.wall()]);
    return { r, seconds };
  }

  /** The starting weights' evaluation; a failure when every one of its rollouts failed. */
  private async evaluateStart(tasks: { eval: number }): Promise<RunFailure | null> {
    const { cfg, o } = this;
    if (!this.evaluations || !(o.initialEval ?? true)) return null;
    const startName = o.startName ?? 'the warm start';
    o.log(
      `held-out evaluation of ${startName} (${tasks.eval} tasks x ${cfg.eval.samplesPerTask} samples, temperature ${cfg.eval.temperature}) ...`,
    );
    const warm = (await this.evaluate('warm-start')).r;
    const failed = this.failures.allFailed();
    if (failed) return failed;
    if (warm.successRate >= 0.95)
      o.log(
        `note: ${startName} already solves ${(warm.successRate * 100).toFixed(0)}% of the held-out tasks; most groups will get equal rewards and be dropped (zero variance), so train batches come slowly and RL has little to learn. Give harder tasks (chain-add: task.kMax, task.maxOperand; a warm start: fewer warmStart.steps).`,
      );
    return null;
  }

  /** Trains until the budget, a stall or failing rollouts: evaluations at every K-th version. */
  private async trainLoop(): Promise<LoopOutcome> {
    const { cfg, services, o, rec } = this;
    const loopStarted = performance.now();
    const completedBefore = rec.completedTrain;
    const busyBefore = (await services.trainerState()).busyMs;
    const blockedBefore = (await services.rolloutState()).admissionBlockedSeconds;
    const trainStartedAtS = o.wall();
    await services.startTraining();
    const submissions = new TrainSubmissions(services, cfg, this.spec.id);
    submissions.topUp(0);
    if (this.showProgress) this.progress.start();
    const budgetMs = cfg.budget.seconds > 0 ? cfg.budget.seconds * 1000 : Infinity;
    const spent = () => performance.now() - loopStarted - (o.budgetExcludesEvals ? this.evalSeconds * 1000 : 0);
    const capacity = new CapacitySampler();
    this.lastStepAt = performance.now();
    let rlStoppedBy: RlStoppedBy = 'steps';
    let failure: RunFailure | null = null;
    let trainer = await services.trainerState();
    while (!trainer.done && spent() < budgetMs) {
      await sleep(TICK_MS);
      this.checkStopped();
      const st = await services.rolloutState();
      this.rolloutLine = `${st.running} rollouts running, ${rec.completedTrain} finished, ${st.queuedGroups} groups queued`;
      capacity.add(st);
      trainer = await services.trainerState();
      if (trainer.failure) throw new Error(`the trainer stopped: ${trainer.failure}`);
      if (trainer.done) break;
      submissions.topUp(st.queuedGroups);
      failure = this.failures.allFailed();
      if (failure) {
        rlStoppedBy = 'rollouts-failed';
        break;
      }
      if (this.evaluations && trainer.version - this.lastEval >= cfg.eval.everyVersions) {
        this.lastEval = trainer.version;
        this.evalSeconds += (await this.evaluate(`v${this.lastEval}`)).seconds;
        this.lastStepAt = performance.now(); // an evaluation pauses the trainer: not a stall
      }
      // Groups whose rollouts all score the same are dropped, so a policy that solves every task or
      // none of them gets no batch at all; without this the run would wait forever.
      if (cfg.budget.stallSeconds > 0 && performance.now() - this.lastStepAt > cfg.budget.stallSeconds * 1000) {
        rlStoppedBy = 'stall';
        failure = this.failures.diagnoseStall(st);
        break;
      }
    }
    const trainSeconds = (performance.now() - loopStarted) / 1000 - this.evalSeconds;
    const blockedAfter = (await services.rolloutState()).admissionBlockedSeconds; // over the same span as trainSeconds
    const loopEndedAtS = o.wall();
    // No batch is trained after the budget: the trainer stays held through the final evaluation,
    // so it is pinned to the version the run ends with.
    await services.pauseTraining();
    await submissions.settled();
    await services.flushSteps();
    this.progress.stop();
    if (rlStoppedBy === 'stall')
      o.log(`\nno train batch for ${cfg.budget.stallSeconds} s; ending RL at step ${rec.steps.length} of ${cfg.budget.steps}.`);
    if (rlStoppedBy === 'steps' && !trainer.done) rlStoppedBy = 'seconds';
    return {
      rlStoppedBy,
      failure,
      trainSeconds,
      trainStartedAtS,
      loopEndedAtS,
      trainRolloutsInLoop: rec.completedTrain - completedBefore,
      trainerBusySeconds: ((await services.trainerState()).busyMs - busyBefore) / 1000,
      admissionBlockedSeconds: {
        capacity: blockedAfter.capacity - blockedBefore.capacity,
        version: blockedAfter.version - blockedBefore.version,
        slots: blockedAfter.slots - blockedBefore.slots,
      },
      capacityHeld: capacity.means(),
    };
  }

  /**
   * The final evaluation, pinned to the version the run ends with, then the rollout-manager stops
   * (the evaluation needs its admission loop, and gates new train admissions meanwhile).
   */
  private async finish(loop: LoopOutcome): Promise<number> {
    const finalVersion = (await this.services.trainerState()).version;
    const lastEvaluated = this.rec.evals.length ? this.rec.evals[this.rec.evals.length - 1].version : null;
    if (this.evaluations && loop.rlStoppedBy !== 'rollouts-failed' && finalVersion !== lastEvaluated) await this.evaluate('final', true);
    await this.services.stopRollouts();
    return finalVersion;
  }

  /** Every rollout of the starting evaluation failed: no training, the failure reported. */
  private async stopEarly(failure: RunFailure, tasks: { train: number; eval: number }): Promise<RunDriverResult> {
    await this.services.stopRollouts();
    const at = this.o.wall();
    return {
      rec: this.rec,
      spec: this.spec,
      rlStoppedBy: 'rollouts-failed',
      failure,
      finalVersion: (await this.services.trainerState()).version,
      finalEvalPinnedTo: this.rec.evals.length ? this.rec.evals[this.rec.evals.length - 1].version : null,
      endedAtS: at,
      trainSeconds: 0,
      evalSeconds: 0,
      evalIntervals: this.evalIntervals,
      trainStartedAtS: at,
      loopEndedAtS: at,
      trainRolloutsInLoop: 0,
      trainerBusySeconds: 0,
      admissionBlockedSeconds: { capacity: 0, version: 0, slots: 0 },
      capacityHeld: { running: 0, untrained: 0, awaitingVersion: 0 },
      tasks,
    };
  }

  private checkStopped(): void {
    if (this.o.signal?.aborted) throw new RunStopped('the run was stopped');
  }
}
