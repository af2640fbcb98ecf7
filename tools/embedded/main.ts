/**
 * `npm run main`: the embedded default. One process, no external services: the built-in tiny
 * Llama-family model is warm-started by supervised fine-tuning on generated demonstrations of the
 * built-in chain-add tool task (cached after the first run), then trained by fully asynchronous RL
 * through the real loop — rollout-manager (white-box agents) -> gateway (token-exact capture) ->
 * inference-proxy (embedded engine) -> Data Pool (trajectories, advantages, filters, Windowed FIFO)
 * -> trainer (prefix-tree packing, CISPO, AdamW) -> weights.published -> the proxy swaps weights —
 * all at once. Held-out tasks are evaluated before step 1 and every K versions, each pinned to one
 * policy version. At the end: a self-contained HTML report and a JSON summary (the last line).
 *
 *   npm run main                          # the demo defaults
 *   npm run main -- --config run.json     # a run of your own (see tools/embedded/run-config.ts)
 *   ANVIL_SEED=2 ANVIL_MAIN_STEPS=40 npm run main
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { engineInfo, setThreads } from '@anvil/engine';
import { startEmbeddedLoop } from './host';
import { Progress } from './progress';
import { chainAddConfigOf, loadRunConfigOrExit } from './run-config';
import { writeRunReport } from './rl-report';
import { RunRecorder } from './run-recorder';
import { warmStart } from './warm-start';
import { taskSetSpecSchema } from '../../apps/rollout-manager/src/tasks/task-set';

const TASK_SET = 'chain-add';

async function main(): Promise<void> {
  const started = performance.now();
  const wall = () => (performance.now() - started) / 1000;
  const cfg = loadRunConfigOrExit(process.argv.slice(2), process.env);
  if (cfg.model !== 'tiny' || cfg.task.set !== 'chain-add') {
    console.error('this build runs the built-in model and task set (model "tiny", task.set "chain-add"); a model directory or a task JSONL is served by the distributed stack');
    process.exit(78);
  }
  setThreads(cfg.engineThreads);
  const info = engineInfo();
  console.log(`anvil main: seed ${cfg.seed}, engine ${info.backend} (${info.reason}), ${cfg.engineThreads} thread(s) per engine call`);
  const taskConfig = chainAddConfigOf(cfg);

  // 1. Warm start (cached; built on WARM_START_THREADS engine threads whatever engineThreads says).
  const ws = await warmStart({ ...cfg.warmStart, task: taskConfig, dataDir: cfg.dataDir }, (l) => console.log(l));
  console.log(
    `warm start: ${ws.cached ? 'cached' : 'built'} ${ws.dir} (seed ${cfg.warmStart.seed}, ${ws.steps} SFT steps x ${cfg.warmStart.tasksPerStep} demonstrations${ws.cached ? '' : `, ${ws.seconds.toFixed(0)} s`})`,
  );

  // 2. The loop, in this process.
  const runId = `main-${new Date().toISOString().replace(/[:.]/g, '-')}-${randomUUID().slice(0, 6)}`;
  const taskSet = {
    id: TASK_SET,
    name: 'chain-add (built in)',
    env: 'chain-add',
    envConfig: taskConfig,
    groupSize: cfg.rollouts.groupSize,
    sampling: { temperature: cfg.rollouts.temperature, maxTokens: cfg.rollouts.maxTokensPerCall },
  };
  const spec = taskSetSpecSchema.parse(taskSet);
  const mismatchSplit = `context=${spec.context.kind} agent=${spec.agent.kind}`;
  const rec = new RunRecorder();
  let lastStepAt = performance.now();
  let rlStoppedBy: 'steps' | 'seconds' | 'stall' = 'steps';
  let fatal: Error | null = null;
  let loopRef: { rollouts: { snapshot(): { running: number; queuedGroups: number } } } | null = null;
  const progress = new Progress(cfg.budget.steps, () => {
    const s = loopRef?.rollouts.snapshot();
    return s ? `${s.running} rollouts running, ${rec.completedTrain} finished, ${s.queuedGroups} groups queued` : '';
  });
  const loop = await startEmbeddedLoop(cfg, {
    checkpointDir: ws.dir,
    runId,
    onFatal: (e) => (fatal = e),
    // Every rollout of this run comes from the one task set: its context manager and agent kind name the mismatch split.
    splitOf: () => mismatchSplit,
    onStep: (e) => {
      lastStepAt = performance.now();
      const row = rec.step(e, wall());
      progress.step({ step: row.step, version: e.version, reward: row.reward, staleness: e.staleness.mean, tokensPerSec: row.uniqueTokens / Math.max(1e-9, e.busyMs / 1000), wallS: wall() });
    },
  });
  loopRef = loop;
  loop.rollouts.onRolloutCompleted((o) => {
    if (o.purpose === 'train') rec.trainRolloutCompleted(o.outcomeReward, wall());
  });

  const evalCount = cfg.task.evalTasks;
  await loop.rollouts.loadBuiltin({ ...taskSet, seed: cfg.seed, trainCount: 400, evalCount });

  const evaluate = async (label: string) => {
    await loop.trainer.pause();
    const version = loop.trainer.currentVersion;
    const t0 = performance.now();
    const r = await loop.rollouts.runEvaluation({ taskSetId: TASK_SET, version, samplesPerTask: cfg.eval.samplesPerTask, temperature: cfg.eval.temperature, evalId: `${runId}-${label}` });
    rec.evaluated(r, wall());
    progress.evaluated(version, r.successRate, (performance.now() - t0) / 1000);
    loop.trainer.resume();
    return r;
  };

  let summaryOut: Record<string, unknown> = {};
  try {
    console.log(`held-out evaluation of the warm start (${evalCount} tasks x ${cfg.eval.samplesPerTask} samples, temperature ${cfg.eval.temperature}) ...`);
    const warm = await evaluate('warm-start');
    if (warm.successRate >= 0.95)
      console.log(
        `note: the warm start already solves ${(warm.successRate * 100).toFixed(0)}% of the held-out tasks; most groups will get equal rewards and be dropped (zero variance), so train batches come slowly and RL has little to learn. Lower warmStart.steps or raise task.kMax / task.maxOperand.`,
      );
    await loop.trainer.start();
    // Train groups are queued a pass over the train split at a time and topped up while the trainer
    // needs them: the Data Pool drops zero-variance groups (often a third of them), so no fixed
    // count is enough (one pass sized to 1.5x the budget once stalled a run one batch short).
    const topUp = async () => {
      if (loop.rollouts.snapshot().queuedGroups < 2 * cfg.scheduler.groupsPerBatch) await loop.rollouts.submit({ taskSetId: TASK_SET });
    };
    await topUp();
    progress.start();
    let lastEval = 0;
    const deadline = cfg.budget.seconds > 0 ? performance.now() + cfg.budget.seconds * 1000 : Infinity;
    lastStepAt = performance.now();
    while (!loop.trainer.done && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      if (!loop.trainer.done) await topUp();
      if (loop.trainer.currentVersion - lastEval >= cfg.eval.everyVersions && !loop.trainer.done) {
        lastEval = loop.trainer.currentVersion;
        await evaluate(`v${lastEval}`);
        lastStepAt = performance.now(); // an evaluation pauses the trainer: not a stall
      }
      // Groups whose rollouts all score the same are dropped, so a policy that solves every task or
      // none of them gets no batch at all; without this the run would wait forever.
      if (cfg.budget.stallSeconds > 0 && performance.now() - lastStepAt > cfg.budget.stallSeconds * 1000) {
        rlStoppedBy = 'stall';
        progress.stop();
        const s = loop.rollouts.snapshot();
        console.log(
          `\nno train batch for ${cfg.budget.stallSeconds} s (${rec.completedTrain} train rollouts finished, ${s.running} running): the groups keep getting equal rewards and are dropped (zero variance). Ending RL at step ${rec.steps.length} of ${cfg.budget.steps}.`,
        );
        break;
      }
    }
    if (rlStoppedBy === 'steps' && !loop.trainer.done) rlStoppedBy = 'seconds';
    progress.stop();
    if (fatal) throw fatal;
    // The final evaluation runs before the rollout-manager stops: it waits for the last published
    // version to be activated (an event the stopped manager would never hear) and needs the
    // manager's admission loop to run its rollouts; it gates new train admissions meanwhile.
    const final = loop.trainer.currentVersion === rec.evals[rec.evals.length - 1].version ? null : await evaluate('final');
    await loop.rollouts.stop(0);
    const last = rec.evals[rec.evals.length - 1];
    summaryOut = rec.summary({
      seed: cfg.seed,
      wallClockSeconds: wall(),
      finalVersion: loop.trainer.currentVersion,
      rlStoppedBy,
      warmStart: { cached: ws.cached, seconds: Number(ws.seconds.toFixed(1)), seed: cfg.warmStart.seed, sftSteps: ws.steps, demonstrations: ws.demonstrations },
      finalEvalPinnedTo: final ? final.policyVersion : last.version,
    });
    const report = writeRunReport(join(cfg.dataDir, 'reports', runId), {
      title: `Anvil embedded run ${runId}`,
      summary: summaryOut,
      steps: rec.steps,
      evals: rec.evals,
      rolloutTimeline: rec.rolloutTimeline,
      stalenessHistogram: Array.from(rec.staleness, (v) => v ?? 0),
      mismatchBySplit: rec.mismatchBySplit(),
      config: cfg,
    });
    console.log(
      `\nheld-out success: warm start ${(warm.successRate * 100).toFixed(1)}% -> ${(last.success * 100).toFixed(1)}% after ${summaryOut.rlSteps as number} RL steps (version ${last.version})`,
    );
    console.log(`report: ${report}`);
    console.log(`checkpoints: ${join(loop.runDir, 'checkpoints')}`);
  } finally {
    progress.stop();
    await loop.close();
  }
  console.log(JSON.stringify(summaryOut));
}

main().catch((err) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  process.exit(1);
});
