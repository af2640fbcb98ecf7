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
 * A user's own run takes the same path from a config file: a Hugging Face model directory (served
 * through its tokenizer and chat template; no warm start unless warmStart.enabled), a task JSONL,
 * a white-box or black-box agent, a verifier, the algorithm's knobs and the budget
 * (tools/embedded/run-config.ts, checked by tools/embedded/user-run.ts).
 *
 *   npm run main                          # the demo defaults
 *   npm run main -- --config run.json     # a run of your own
 *   ANVIL_SEED=2 ANVIL_MAIN_STEPS=40 npm run main
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { engineInfo, setThreads } from '@anvil/engine';
import { runRlPhase } from './rl-phase';
import { writeRunReport } from './rl-report';
import { startingModel } from './starting-model';
import { loadUserRunOrExit, taskSetOf } from './user-run';

async function main(): Promise<void> {
  const started = performance.now();
  const wall = () => (performance.now() - started) / 1000;
  const cfg = loadUserRunOrExit(process.argv.slice(2), process.env);
  setThreads(cfg.engineThreads);
  const info = engineInfo();
  console.log(`anvil main: seed ${cfg.seed}, engine ${info.backend} (${info.reason}), ${cfg.engineThreads} thread(s) per engine call`);

  // 1. The starting weights.
  const start = await startingModel(cfg, (l) => console.log(l));

  // 2. The loop, in this process: RL and the evaluations.
  const runId = `main-${new Date().toISOString().replace(/[:.]/g, '-')}-${randomUUID().slice(0, 6)}`;
  const startName = cfg.model !== 'tiny' && cfg.warmStart.enabled !== true ? 'the starting weights' : 'the warm start';
  const rl = await runRlPhase({ cfg, runId, model: start.model, taskSet: taskSetOf(cfg), wall, log: (l) => console.log(l), startName });
  const { rec } = rl;

  // 3. The report and the summary.
  const summary = rec.summary({
    seed: cfg.seed,
    wallClockSeconds: rl.endedAtS,
    finalVersion: rl.finalVersion,
    rlStoppedBy: rl.rlStoppedBy,
    warmStart: start.warmStart,
    finalEvalPinnedTo: rl.finalEvalPinnedTo,
  });
  const report = writeRunReport(join(cfg.dataDir, 'reports', runId), {
    title: `Anvil embedded run ${runId}`,
    summary,
    steps: rec.steps,
    evals: rec.evals,
    rolloutTimeline: rec.rolloutTimeline,
    stalenessHistogram: Array.from(rec.staleness, (v) => v ?? 0),
    mismatchBySplit: rec.mismatchBySplit(),
    config: cfg,
  });
  const warm = rec.evals[0];
  const last = rec.evals[rec.evals.length - 1];
  if (warm && last)
    console.log(
      `\nheld-out success: warm start ${(warm.success * 100).toFixed(1)}% -> ${(last.success * 100).toFixed(1)}% after ${summary.rlSteps as number} RL steps (version ${last.version})`,
    );
  else
    console.log(
      `\n${summary.rlSteps as number} RL steps (version ${rl.finalVersion}); no held-out evaluation (the task set has no eval tasks)`,
    );
  console.log(`report: ${report}`);
  console.log(`checkpoints: ${rl.checkpointsDir}`);
  console.log(JSON.stringify(summary));
}

main().catch((err) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  process.exit(1);
});
