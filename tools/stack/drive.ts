/**
 * Drives one run through the services' own APIs and events, the way tools/embedded/main.ts drives
 * the in-process loop: load the built-in task set into the rollout-manager, evaluate the warm start
 * pinned to version 0, queue train groups a pass over the train split at a time (topped up while
 * the trainer needs them), evaluate every K versions with the trainer paused, stop at the step
 * budget (or the wall-clock cap, or a stall), evaluate the final version, and write the same report
 * and JSON summary. Train rewards come from rollout.completed on Kafka; the trainer's steps from
 * its internal API.
 */
import { join } from 'node:path';
import { TOPICS, type EvaluationCompletedV1 } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import { Progress } from '../embedded/progress';
import { writeRunReport } from '../embedded/rl-report';
import type { TaskSetLoader } from '../embedded/rl-phase';
import { trainPass, type RunConfig } from '../embedded/run-config';
import { taskSetOf } from '../embedded/user-run';
import type { RolloutManagerClient, RolloutState, TrainerClient } from './clients';
import { RunRecorder } from '../embedded/run-recorder';
import { sleep } from './service-process';

export interface DriveOptions {
  cfg: RunConfig;
  runId: string;
  rolloutManager: RolloutManagerClient;
  trainer: TrainerClient;
  /** The run's Kafka bus (its topic prefix): rollout.completed carries the train rewards. */
  bus: MessageBus;
  warmStart: Record<string, unknown>;
  checkpointDir: string;
  /** Set when the run is being stopped (Ctrl-C, `down`): the loop ends at its next tick. */
  signal: AbortSignal;
  /** Added to the summary (where the run's logs, database and topics are). */
  extraSummary: Record<string, unknown>;
}

export class RunStopped extends Error {
  override name = 'RunStopped';
}

export async function driveRun(o: DriveOptions): Promise<{ summary: Record<string, unknown>; report: string }> {
  const { cfg, runId, rolloutManager: rm, trainer } = o;
  const startedEpoch = Date.now();
  const wall = () => (Date.now() - startedEpoch) / 1000;
  const rec = new RunRecorder();
  // The rollout-manager's last answer (a holder: the progress line reads it from a timer).
  const rm$: { state: RolloutState | null } = { state: null };
  const progress = new Progress(cfg.budget.steps, () => {
    const s = rm$.state;
    return s ? `${s.running} rollouts running, ${rec.completedTrain} finished, ${s.queuedGroups} groups queued` : '';
  });
  const checkStopped = () => {
    if (o.signal.aborted) throw new RunStopped('the run was stopped');
  };

  // Eval rollouts say so on rollout.started (and their groups start with 'eval:'); they are never trained on.
  const evalRollouts = new Set<string>();
  const sub = await o.bus.subscribe({
    group: 'anvil.stack-driver',
    topics: [TOPICS.rollouts],
    fromBeginning: true,
    handler: async (e) => {
      if (e.type === 'rollout.started' && (e.payload as { purpose?: string }).purpose === 'eval')
        evalRollouts.add((e.payload as { rolloutId: string }).rolloutId);
      if (e.type !== 'rollout.completed') return;
      const p = e.payload as { rolloutId: string; groupId: string; outcomeReward: number | null };
      if (evalRollouts.delete(p.rolloutId) || p.groupId.startsWith('eval:')) return;
      rec.trainRolloutCompleted(p.outcomeReward, wall());
    },
  });

  let lastSeq = 0;
  let lastStepAt = performance.now();
  const pollSteps = async () => {
    const r = await trainer.steps(lastSeq);
    if (r.missed > 0) console.log(`note: ${r.missed} trainer step report(s) were no longer held by the trainer; the report skips them`);
    for (const s of r.steps) {
      lastSeq = s.seq;
      lastStepAt = performance.now();
      const row = rec.step(s.event, (s.at - startedEpoch) / 1000);
      progress.step({
        step: row.step,
        version: row.version,
        reward: row.reward,
        staleness: row.stalenessMean,
        tokensPerSec: row.uniqueTokens / Math.max(1e-9, row.trainSeconds),
        wallS: row.wallS,
      });
    }
  };

  /**
   * Reads every step the trainer has taken. The trainer counts a batch (its version, `done`) a
   * moment before it logs the batch's step report (after the checkpoint and the events), so the
   * log is complete once its last step carries the trainer's current version and it holds as many
   * steps as the trainer handled batches.
   */
  const drainSteps = async () => {
    const deadline = performance.now() + 60_000;
    for (;;) {
      const t = await trainer.state();
      await pollSteps();
      const lastVersion = rec.steps.length ? rec.steps[rec.steps.length - 1].version : 0;
      if (lastSeq >= (t.totals?.batches ?? 0) && lastVersion >= (t.version ?? 0)) return;
      if (performance.now() > deadline)
        throw new Error(`the trainer is at version ${t.version} but its step log reached ${lastVersion} within 60 s`);
      await sleep(100);
    }
  };

  // The task set the embedded job declares for the same config (its agent, verifier, context, limits,
  // weight-swap policy, tool delays and their held-out twin without them), loaded over HTTP.
  const taskSet = taskSetOf(cfg);
  const evalTaskSetId = taskSet.evalTaskSetId ?? taskSet.spec.id;
  const loader: TaskSetLoader = {
    loadBuiltin: ({ seed, trainCount, evalCount, ...spec }) => rm.loadBuiltin(spec, { env: spec.env, seed, trainCount, evalCount }),
    loadTaskSet: () => Promise.reject(new Error('a stack run loads the built-in task set only (tools/stack/up.ts refuses a task JSONL)')),
  };
  const samplesPerTask = cfg.eval.samplesPerTask;
  const evaluate = async (label: string): Promise<EvaluationCompletedV1> => {
    const { version } = await trainer.pause();
    const t0 = performance.now();
    const r = await rm.evaluate({
      taskSetId: evalTaskSetId,
      version,
      samplesPerTask,
      temperature: cfg.eval.temperature,
      evalId: `${runId}-${label}`,
    });
    rec.evaluated(r, wall());
    progress.evaluated(r.policyVersion, r.successRate, (performance.now() - t0) / 1000);
    await trainer.resume();
    return r;
  };

  try {
    await taskSet.load(loader);
    console.log(
      `held-out evaluation of the warm start (${cfg.task.evalTasks} tasks x ${samplesPerTask} samples, temperature ${cfg.eval.temperature}) ...`,
    );
    const warm = await evaluate('warm-start');
    if (warm.successRate >= 0.95)
      console.log(
        `note: the warm start already solves ${(warm.successRate * 100).toFixed(0)}% of the held-out tasks; most groups will get equal rewards and be dropped (zero variance), so train batches come slowly.`,
      );
    checkStopped();
    // A pass over the train split at a time, topped up while the trainer needs groups: the Data
    // Pool drops zero-variance groups, so no fixed count is enough (as in the embedded job). A
    // submission of a whole pass takes seconds over HTTP; it runs beside the loop, which keeps
    // reading the trainer's steps (their rewards, the evaluation points) meanwhile.
    let submitting: Promise<unknown> | null = null;
    let passes = 0;
    let submitError: Error | null = null;
    const topUp = async () => {
      if (submitError) throw submitError;
      rm$.state = await rm.state();
      if (submitting || rm$.state.queuedGroups >= 2 * cfg.scheduler.groupsPerBatch) return;
      submitting = rm
        .submit(trainPass(cfg, taskSet.spec.id, passes++))
        .catch((e: Error) => (submitError = e))
        .finally(() => (submitting = null));
    };
    await topUp();
    progress.start();
    let lastEval = 0;
    let rlStoppedBy: 'steps' | 'seconds' | 'stall' = 'steps';
    const deadline = cfg.budget.seconds > 0 ? performance.now() + cfg.budget.seconds * 1000 : Infinity;
    lastStepAt = performance.now();
    let done = false;
    while (performance.now() < deadline) {
      await sleep(200);
      checkStopped();
      await pollSteps();
      const t = await trainer.state();
      if (t.failure) throw new Error(`the trainer stopped: ${t.failure}`);
      done = t.done;
      if (done) break;
      await topUp();
      if ((t.version ?? 0) - lastEval >= cfg.eval.everyVersions) {
        lastEval = t.version ?? 0;
        await evaluate(`v${lastEval}`);
        lastStepAt = performance.now(); // an evaluation pauses the trainer: not a stall
      }
      if (cfg.budget.stallSeconds > 0 && performance.now() - lastStepAt > cfg.budget.stallSeconds * 1000) {
        rlStoppedBy = 'stall';
        progress.stop();
        console.log(
          `\nno train batch for ${cfg.budget.stallSeconds} s (${rec.completedTrain} train rollouts finished, ${rm$.state?.running ?? 0} running): the groups keep getting equal rewards and are dropped (zero variance). Ending RL at step ${rec.steps.length} of ${cfg.budget.steps}.`,
        );
        break;
      }
    }
    if (rlStoppedBy === 'steps' && !done) rlStoppedBy = 'seconds';
    await submitting;
    await drainSteps();
    progress.stop();
    const finalVersion = (await trainer.state()).version ?? 0;
    const final = finalVersion === rec.evals[rec.evals.length - 1].version ? null : await evaluate('final');
    const summary = {
      ...rec.summary({
        seed: cfg.seed,
        wallClockSeconds: wall(),
        finalVersion,
        rlStoppedBy,
        warmStart: o.warmStart,
        finalEvalPinnedTo: final ? final.policyVersion : rec.evals[rec.evals.length - 1].version,
      }),
      ...o.extraSummary,
    };
    const report = writeRunReport(join(cfg.dataDir, 'reports', runId), {
      title: `Anvil distributed run ${runId}`,
      summary,
      steps: rec.steps,
      evals: rec.evals,
      rolloutTimeline: rec.rolloutTimeline,
      stalenessHistogram: Array.from(rec.staleness, (v) => v ?? 0),
      mismatchBySplit: rec.mismatchBySplit(),
      config: cfg,
    });
    const last = rec.evals[rec.evals.length - 1];
    const trained = rec.steps.filter((s) => !s.skipped).length;
    console.log(
      `\nheld-out success: warm start ${(warm.successRate * 100).toFixed(1)}% -> ${(last.success * 100).toFixed(1)}% after ${trained} RL steps (version ${last.version})`,
    );
    console.log(`report: ${report}`);
    console.log(`checkpoints: ${o.checkpointDir}`);
    return { summary, report };
  } finally {
    progress.stop();
    await sub.stop().catch(() => undefined);
  }
}
