/**
 * The one run driver, shared by `anvil train` (in process), `anvil stack up` (distributed) and the
 * e2e bench: load the task set into the rollout-manager, evaluate the starting weights pinned to
 * version 0, train asynchronously (train groups queued a pass over the train split at a time and
 * topped up while the trainer needs them), evaluate every K versions with the trainer held at
 * exactly that version, stop at the step budget, the wall-clock cap, a stall or when every rollout
 * fails, evaluate the final version. It talks to the services only through the RunServices port;
 * what happened is in the RunRecorder it returns, and the caller writes the report and summary.
 */
import type { EvaluationCompletedV1 } from '@anvil/contracts';
import { taskSetSpecSchema, type TaskSetSpec } from '@anvil/rollout-manager';
import { trainPass, type RunConfig } from '../config/run-config';
import { Progress } from '../report/progress';
import { RunRecorder } from '../report/run-recorder';
import { RolloutFailures, type RunFailure } from './failures';
import type { CompletedRollout, RunServices } from './services';
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

export async function driveRun(o: RunDriverOptions): Promise<RunDriverResult> {
  const { cfg, runId, services, wall, log } = o;
  const spec = taskSetSpecSchema.parse(o.taskSet.spec);
  const rec = new RunRecorder();
  const failures = new RolloutFailures(cfg.rollouts.groupSize);
  const startedEpochMs = Date.now() - wall() * 1000;
  const showProgress = o.progress ?? true;
  let lastStepAt = performance.now();
  let evaluations = true;
  let lastEval = 0;
  // The progress line's view of the rollout-manager (read from a timer, refreshed each tick).
  let rolloutLine = '';
  const progress = new Progress(cfg.budget.steps, () => rolloutLine);
  const checkStopped = () => {
    if (o.signal?.aborted) throw new RunStopped('the run was stopped');
  };

  services.onStep((e, atMs) => {
    lastStepAt = performance.now();
    const row = rec.step(e, (atMs - startedEpochMs) / 1000);
    progress.step({
      step: row.step,
      version: e.version,
      reward: row.reward,
      staleness: e.staleness.mean,
      tokensPerSec: row.uniqueTokens / Math.max(1e-9, e.busyMs / 1000),
      wallS: row.wallS,
    });
    // Hold the trainer at an evaluation point before it takes the next batch, so each evaluation
    // is pinned to exactly every K-th version (the loop below runs it).
    if (evaluations && e.version - lastEval >= cfg.eval.everyVersions) void services.pauseTraining().catch(() => undefined);
  });
  services.onRolloutCompleted((r) => {
    failures.record(r);
    if (r.purpose !== 'train') return;
    rec.trainRolloutCompleted(r.outcomeReward, wall());
    o.onRolloutCompleted?.(r, wall());
  });

  let evalSeconds = 0;
  const evalIntervals: [number, number][] = [];
  const evaluate = async (label: string, keepPaused = false) => {
    const from = wall();
    const version = await services.pauseTraining();
    const t0 = performance.now();
    const r = await services.evaluate({
      taskSetId: o.taskSet.evalTaskSetId ?? spec.id,
      version,
      samplesPerTask: cfg.eval.samplesPerTask,
      temperature: cfg.eval.temperature,
      evalId: `${runId}-${label}`,
    });
    rec.evaluated(r, wall());
    const seconds = (performance.now() - t0) / 1000;
    if (showProgress) progress.evaluated(version, r.successRate, seconds);
    else log(`held-out success ${(r.successRate * 100).toFixed(1)}% at policy version ${version} (evaluation ${seconds.toFixed(1)} s)`);
    if (!keepPaused) await services.resumeTraining();
    evalIntervals.push([from, wall()]);
    return { r, seconds };
  };

  try {
    const tasks = await o.taskSet.load(services.tasks);
    evaluations = tasks.eval > 0;
    if (!evaluations)
      log('note: the task set has no held-out tasks (no line of split eval): no evaluations, held-out success is not measured');
    const startName = o.startName ?? 'the warm start';
    if (evaluations && (o.initialEval ?? true)) {
      log(
        `held-out evaluation of ${startName} (${tasks.eval} tasks x ${cfg.eval.samplesPerTask} samples, temperature ${cfg.eval.temperature}) ...`,
      );
      const warm = (await evaluate('warm-start')).r;
      const failed = failures.allFailed();
      if (failed) return await stopEarly('rollouts-failed', failed, tasks);
      if (warm.successRate >= 0.95)
        log(
          `note: ${startName} already solves ${(warm.successRate * 100).toFixed(0)}% of the held-out tasks; most groups will get equal rewards and be dropped (zero variance), so train batches come slowly and RL has little to learn. Give harder tasks (chain-add: task.kMax, task.maxOperand; a warm start: fewer warmStart.steps).`,
        );
    }
    checkStopped();
    const loopStarted = performance.now();
    const completedBefore = rec.completedTrain;
    const busyBefore = (await services.trainerState()).busyMs;
    const blockedBefore = (await services.rolloutState()).admissionBlockedSeconds;
    const trainStartedAtS = wall();
    await services.startTraining();
    // Train groups are queued a pass over the train split at a time and topped up while the trainer
    // needs them: the Data Pool drops zero-variance groups (often a third of them), so no fixed
    // count is enough. A pass takes seconds to submit over HTTP: it runs beside the loop.
    let passes = 0;
    let submitting: Promise<void> | null = null;
    let submitError: Error | null = null;
    const topUp = (queuedGroups: number) => {
      if (submitError) throw submitError;
      if (submitting || queuedGroups >= 2 * cfg.scheduler.groupsPerBatch) return;
      submitting = services
        .submit(trainPass(cfg, spec.id, passes++))
        .catch((e: Error) => void (submitError = e))
        .finally(() => (submitting = null));
    };
    topUp(0);
    if (showProgress) progress.start();
    const budgetMs = cfg.budget.seconds > 0 ? cfg.budget.seconds * 1000 : Infinity;
    const spent = () => performance.now() - loopStarted - (o.budgetExcludesEvals ? evalSeconds * 1000 : 0);
    lastStepAt = performance.now();
    const held = { samples: 0, running: 0, untrained: 0, awaitingVersion: 0 };
    let rlStoppedBy: RlStoppedBy = 'steps';
    let failure: RunFailure | null = null;
    let trainer = await services.trainerState();
    while (!trainer.done && spent() < budgetMs) {
      await sleep(TICK_MS);
      checkStopped();
      const st = await services.rolloutState();
      rolloutLine = `${st.running} rollouts running, ${rec.completedTrain} finished, ${st.queuedGroups} groups queued`;
      held.samples++;
      held.running += st.staleness.inFlight.length;
      held.untrained += st.staleness.untrained.length;
      held.awaitingVersion += st.staleness.awaitingVersion.length;
      trainer = await services.trainerState();
      if (trainer.failure) throw new Error(`the trainer stopped: ${trainer.failure}`);
      if (trainer.done) break;
      topUp(st.queuedGroups);
      failure = failures.allFailed();
      if (failure) {
        rlStoppedBy = 'rollouts-failed';
        break;
      }
      if (evaluations && trainer.version - lastEval >= cfg.eval.everyVersions) {
        lastEval = trainer.version;
        evalSeconds += (await evaluate(`v${lastEval}`)).seconds;
        lastStepAt = performance.now(); // an evaluation pauses the trainer: not a stall
      }
      // Groups whose rollouts all score the same are dropped, so a policy that solves every task or
      // none of them gets no batch at all; without this the run would wait forever.
      if (cfg.budget.stallSeconds > 0 && performance.now() - lastStepAt > cfg.budget.stallSeconds * 1000) {
        rlStoppedBy = 'stall';
        failure = failures.diagnoseStall(st);
        break;
      }
    }
    const trainSeconds = (performance.now() - loopStarted) / 1000 - evalSeconds;
    const blockedAfter = (await services.rolloutState()).admissionBlockedSeconds; // over the same span as trainSeconds
    const loopEndedAtS = wall();
    // No batch is trained after the budget: the trainer stays held through the final evaluation,
    // so it is pinned to the version the run ends with.
    await services.pauseTraining();
    await submitting;
    await services.flushSteps();
    progress.stop();
    if (rlStoppedBy === 'stall' && failure)
      log(`\nno train batch for ${cfg.budget.stallSeconds} s; ending RL at step ${rec.steps.length} of ${cfg.budget.steps}.`);
    const trainRolloutsInLoop = rec.completedTrain - completedBefore;
    const trainerBusySeconds = ((await services.trainerState()).busyMs - busyBefore) / 1000;
    const n = Math.max(1, held.samples);
    if (rlStoppedBy === 'steps' && !trainer.done) rlStoppedBy = 'seconds';
    // The final evaluation runs before the rollout-manager stops: it needs the manager's admission
    // loop to run its rollouts, and it gates new train admissions meanwhile.
    let final: EvaluationCompletedV1 | null = null;
    const finalVersion = (await services.trainerState()).version;
    const lastEvaluated = rec.evals.length ? rec.evals[rec.evals.length - 1].version : null;
    if (evaluations && rlStoppedBy !== 'rollouts-failed' && finalVersion !== lastEvaluated) final = (await evaluate('final', true)).r;
    await services.stopRollouts();
    const last = rec.evals[rec.evals.length - 1];
    return {
      rec,
      spec,
      rlStoppedBy,
      failure,
      finalVersion,
      finalEvalPinnedTo: final ? final.policyVersion : (last?.version ?? null),
      endedAtS: wall(),
      trainSeconds,
      evalSeconds,
      evalIntervals,
      trainStartedAtS,
      loopEndedAtS,
      trainRolloutsInLoop,
      trainerBusySeconds,
      admissionBlockedSeconds: {
        capacity: blockedAfter.capacity - blockedBefore.capacity,
        version: blockedAfter.version - blockedBefore.version,
        slots: blockedAfter.slots - blockedBefore.slots,
      },
      capacityHeld: { running: held.running / n, untrained: held.untrained / n, awaitingVersion: held.awaitingVersion / n },
      tasks,
    };
  } finally {
    progress.stop();
  }

  /** Every rollout of the starting evaluation failed: no training, the failure reported. */
  async function stopEarly(by: RlStoppedBy, failure: RunFailure, tasks: { train: number; eval: number }): Promise<RunDriverResult> {
    await services.stopRollouts();
    const at = wall();
    return {
      rec,
      spec,
      rlStoppedBy: by,
      failure,
      finalVersion: (await services.trainerState()).version,
      finalEvalPinnedTo: rec.evals.length ? rec.evals[rec.evals.length - 1].version : null,
      endedAtS: at,
      trainSeconds: 0,
      evalSeconds: 0,
      evalIntervals,
      trainStartedAtS: at,
      loopEndedAtS: at,
      trainRolloutsInLoop: 0,
      trainerBusySeconds: 0,
      admissionBlockedSeconds: { capacity: 0, version: 0, slots: 0 },
      capacityHeld: { running: 0, untrained: 0, awaitingVersion: 0 },
      tasks,
    };
  }
}
