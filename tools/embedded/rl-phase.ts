/**
 * The embedded job's RL phase, shared by `npm run main` and `npm run bench -- e2e`: start the loop
 * in this process (tools/embedded/host.ts), load the task set into the rollout-manager, evaluate
 * the starting weights pinned to version 0, train asynchronously (train groups queued a pass over
 * the train split at a time and topped up while the trainer needs them), evaluate every K versions
 * with the trainer paused at exactly that version, stop at the step budget, the wall-clock cap or a
 * stall, evaluate the final version, and close the loop. What happened is in the RunRecorder it
 * returns; the caller writes the report and the summary.
 */
import type { EvaluationCompletedV1 } from '@anvil/contracts';
import { startEmbeddedLoop, type EmbeddedLoop, type LoopModel } from './host';
import { Progress } from './progress';
import { trainPass, type RunConfig } from './run-config';
import { RunRecorder } from './run-recorder';
import {
  taskSetSpecSchema,
  type TaskSetSpec,
  type TaskSetSpecInput,
  type RolloutOutcome,
  type RolloutRuntime,
} from '@anvil/rollout-manager';

/** What loading a task set needs of the rollout-manager. */
export type TaskSetLoader = Pick<RolloutRuntime, 'loadBuiltin' | 'loadTaskSet'>;

export interface RlTaskSet {
  spec: TaskSetSpecInput & { id: string };
  /** The task set held-out evaluations run on, when not `spec.id` (the same eval tasks without the train set's tool delays). */
  evalTaskSetId?: string;
  /** Loads the task set's tasks into the rollout-manager (in process, or over HTTP in a stack run); returns how many train and eval tasks it holds. */
  load(rollouts: TaskSetLoader): Promise<{ train: number; eval: number }>;
}

export interface RlPhaseOptions {
  cfg: RunConfig;
  runId: string;
  /** The starting weights and how the gateway serves them. */
  model: LoopModel;
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
   * the wall clock of the whole phase, as the main job documents). Runs compared at equal wall
   * clock need it, or a run that reaches more evaluation points loses training time to them.
   */
  budgetExcludesEvals?: boolean;
  onRolloutCompleted?: (o: RolloutOutcome, wallS: number) => void;
}

export interface RlPhaseResult {
  rec: RunRecorder;
  spec: TaskSetSpec;
  runDir: string;
  checkpointsDir: string;
  rlStoppedBy: 'steps' | 'seconds' | 'stall';
  finalVersion: number;
  /** The version the last evaluation was pinned to (null: the task set has no held-out tasks). */
  finalEvalPinnedTo: number | null;
  /** The wall clock (o.wall) when the phase ended, before the loop was closed. */
  endedAtS: number;
  /** Seconds from the trainer's start to the end of the loop, without the evaluations inside it. */
  trainSeconds: number;
  /** Seconds the evaluations inside the loop took (the starting and final ones aside). */
  evalSeconds: number;
  /** When each evaluation ran, [start, end] on the o.wall clock (the starting and final ones included). */
  evalIntervals: [number, number][];
  /** o.wall when the trainer started (RL time begins) and when the loop ended (the budget spent, before the final evaluation). */
  trainStartedAtS: number;
  loopEndedAtS: number;
  /** Train rollouts finished within trainSeconds (a rollout finishing during an evaluation counts). */
  trainRolloutsInLoop: number;
  /** The trainer's busy time (training, checkpointing, publishing) over the loop. */
  trainerBusySeconds: number;
  /** Over the loop: seconds a train group waited at the head of the rollout queue, by what held it (the rollout-manager's admissionBlockedSeconds). */
  admissionBlockedSeconds: { capacity: number; version: number; slots: number };
  /** Over the loop (sampled every 200 ms, evaluations aside): mean groups holding the staleness capacity, by state. */
  capacityHeld: { running: number; untrained: number; awaitingVersion: number };
  tasks: { train: number; eval: number };
}

export async function runRlPhase(o: RlPhaseOptions): Promise<RlPhaseResult> {
  const { cfg, runId, wall, log } = o;
  const spec = taskSetSpecSchema.parse(o.taskSet.spec);
  const mismatchSplit = `context=${spec.context.kind} agent=${spec.agent.kind}`;
  const rec = new RunRecorder();
  let lastStepAt = performance.now();
  let rlStoppedBy: RlPhaseResult['rlStoppedBy'] = 'steps';
  let fatal: Error | null = null;
  let loopRef: EmbeddedLoop | null = null;
  let lastEval = 0;
  let evaluations = true;
  const progress = new Progress(cfg.budget.steps, () => {
    const s = loopRef?.rollouts.snapshot();
    return s ? `${s.running} rollouts running, ${rec.completedTrain} finished, ${s.queuedGroups} groups queued` : '';
  });
  const showProgress = o.progress ?? true;
  const loop = await startEmbeddedLoop(cfg, {
    model: o.model,
    runId,
    onFatal: (e) => (fatal = e),
    // Every rollout of this run comes from the one task set: its context manager and agent kind name the mismatch split.
    splitOf: () => mismatchSplit,
    onStep: (e) => {
      lastStepAt = performance.now();
      const row = rec.step(e, wall());
      progress.step({
        step: row.step,
        version: e.version,
        reward: row.reward,
        staleness: e.staleness.mean,
        tokensPerSec: row.uniqueTokens / Math.max(1e-9, e.busyMs / 1000),
        wallS: wall(),
      });
      // Hold the trainer at an evaluation point before it takes the next batch, so each evaluation
      // is pinned to exactly every K-th version (the loop below runs it).
      if (evaluations && e.version - lastEval >= cfg.eval.everyVersions) void loopRef?.trainer.pause();
    },
  });
  loopRef = loop;
  // How train rollouts ended, so a stall can say why no batch came (equal rewards, or an agent or verifier failing).
  const finishes = new Map<string, number>();
  let lastError: string | null = null;
  loop.rollouts.onRolloutCompleted((r) => {
    if (r.purpose !== 'train') return;
    finishes.set(r.finishReason, (finishes.get(r.finishReason) ?? 0) + 1);
    if (r.error) lastError = r.error;
    rec.trainRolloutCompleted(r.outcomeReward, wall());
    o.onRolloutCompleted?.(r, wall());
  });

  let evalSeconds = 0;
  const evalIntervals: [number, number][] = [];
  let trainStartedAtS = 0;
  let loopEndedAtS = 0;
  let trainSeconds = 0;
  let trainRolloutsInLoop = 0;
  let final: EvaluationCompletedV1 | null = null;
  let tasks = { train: 0, eval: 0 };
  try {
    tasks = await o.taskSet.load(loop.rollouts);
    evaluations = tasks.eval > 0;
    if (!evaluations)
      log('note: the task set has no held-out tasks (no line of split eval): no evaluations, held-out success is not measured');
    const evaluate = async (label: string, keepPaused = false) => {
      const from = wall();
      await loop.trainer.pause();
      const version = loop.trainer.currentVersion;
      const t0 = performance.now();
      const r = await loop.rollouts.runEvaluation({
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
      if (!keepPaused) loop.trainer.resume();
      evalIntervals.push([from, wall()]);
      return { r, seconds };
    };

    if (evaluations && (o.initialEval ?? true)) {
      log(
        `held-out evaluation of ${o.startName ?? 'the warm start'} (${tasks.eval} tasks x ${cfg.eval.samplesPerTask} samples, temperature ${cfg.eval.temperature}) ...`,
      );
      const warm = (await evaluate('warm-start')).r;
      if (warm.successRate >= 0.95)
        log(
          `note: ${o.startName ?? 'the warm start'} already solves ${(warm.successRate * 100).toFixed(0)}% of the held-out tasks; most groups will get equal rewards and be dropped (zero variance), so train batches come slowly and RL has little to learn. Lower warmStart.steps or raise task.kMax / task.maxOperand.`,
        );
    }
    const loopStarted = performance.now();
    const completedBefore = rec.completedTrain;
    const busyBefore = loop.trainer.totals.busyMs;
    const blockedBefore = loop.rollouts.snapshot().admissionBlockedSeconds;
    trainStartedAtS = wall();
    await loop.trainer.start();
    // Train groups are queued a pass over the train split at a time and topped up while the trainer
    // needs them: the Data Pool drops zero-variance groups (often a third of them), so no fixed
    // count is enough (one pass sized to 1.5x the budget once stalled a run one batch short).
    let passes = 0;
    const topUp = async () => {
      if (loop.rollouts.snapshot().queuedGroups < 2 * cfg.scheduler.groupsPerBatch)
        await loop.rollouts.submit(trainPass(cfg, spec.id, passes++));
    };
    await topUp();
    if (showProgress) progress.start();
    const budgetMs = cfg.budget.seconds > 0 ? cfg.budget.seconds * 1000 : Infinity;
    const spent = () => performance.now() - loopStarted - (o.budgetExcludesEvals ? evalSeconds * 1000 : 0);
    lastStepAt = performance.now();
    const held = { samples: 0, running: 0, untrained: 0, awaitingVersion: 0 };
    while (!loop.trainer.done && spent() < budgetMs) {
      await new Promise((r) => setTimeout(r, 200));
      if (fatal) break;
      const st = loop.rollouts.snapshot().staleness;
      held.samples++;
      held.running += st.inFlight.length;
      held.untrained += st.untrained.length;
      held.awaitingVersion += st.awaitingVersion.length;
      if (!loop.trainer.done) await topUp();
      if (evaluations && loop.trainer.currentVersion - lastEval >= cfg.eval.everyVersions && !loop.trainer.done) {
        lastEval = loop.trainer.currentVersion;
        evalSeconds += (await evaluate(`v${lastEval}`)).seconds;
        lastStepAt = performance.now(); // an evaluation pauses the trainer: not a stall
      }
      // Groups whose rollouts all score the same are dropped, so a policy that solves every task or
      // none of them gets no batch at all; without this the run would wait forever.
      if (cfg.budget.stallSeconds > 0 && performance.now() - lastStepAt > cfg.budget.stallSeconds * 1000) {
        rlStoppedBy = 'stall';
        progress.stop();
        const s = loop.rollouts.snapshot();
        const failed = finishes.get('env_error') ?? 0;
        const why =
          failed > rec.completedTrain / 2
            ? `most rollouts end in an environment error (agent or verifier failing; last: ${String(lastError).slice(0, 500)})`
            : 'the groups keep getting equal rewards and are dropped (zero variance)';
        log(
          `\nno train batch for ${cfg.budget.stallSeconds} s (${rec.completedTrain} train rollouts finished: ${[...finishes].map(([k, n]) => `${k} ${n}`).join(', ')}; ${s.running} running): ${why}. Ending RL at step ${rec.steps.length} of ${cfg.budget.steps}.`,
        );
        break;
      }
    }
    trainSeconds = (performance.now() - loopStarted) / 1000 - evalSeconds;
    const blockedAfter = loop.rollouts.snapshot().admissionBlockedSeconds; // over the same span as trainSeconds
    loopEndedAtS = wall();
    // No batch is trained after the budget: the trainer stays held through the final evaluation
    // until the loop closes (the batches queued meanwhile are handed back untrained), so the final
    // evaluation is pinned to the version the run ends with.
    await loop.trainer.pause();
    trainRolloutsInLoop = rec.completedTrain - completedBefore;
    const trainerBusySeconds = (loop.trainer.totals.busyMs - busyBefore) / 1000;
    const n = Math.max(1, held.samples);
    const capacityHeld = { running: held.running / n, untrained: held.untrained / n, awaitingVersion: held.awaitingVersion / n };
    const admissionBlockedSeconds = {
      capacity: blockedAfter.capacity - blockedBefore.capacity,
      version: blockedAfter.version - blockedBefore.version,
      slots: blockedAfter.slots - blockedBefore.slots,
    };
    if (rlStoppedBy === 'steps' && !loop.trainer.done) rlStoppedBy = 'seconds';
    progress.stop();
    if (fatal) throw fatal;
    // The final evaluation runs before the rollout-manager stops: it waits for the last published
    // version to be activated (an event the stopped manager would never hear) and needs the
    // manager's admission loop to run its rollouts; it gates new train admissions meanwhile.
    const lastEvaluated = rec.evals.length ? rec.evals[rec.evals.length - 1].version : null;
    if (evaluations && loop.trainer.currentVersion !== lastEvaluated) final = (await evaluate('final', true)).r;
    await loop.rollouts.stop(0);
    const last = rec.evals[rec.evals.length - 1];
    const endedAtS = wall();
    return {
      endedAtS,
      rec,
      spec,
      runDir: loop.runDir,
      checkpointsDir: loop.checkpointsDir,
      rlStoppedBy,
      finalVersion: loop.trainer.currentVersion,
      finalEvalPinnedTo: final ? final.policyVersion : (last?.version ?? null),
      trainSeconds,
      evalSeconds,
      evalIntervals,
      trainStartedAtS,
      loopEndedAtS,
      trainRolloutsInLoop,
      trainerBusySeconds,
      admissionBlockedSeconds,
      capacityHeld,
      tasks,
    };
  } finally {
    progress.stop();
    await loop.close();
  }
}
