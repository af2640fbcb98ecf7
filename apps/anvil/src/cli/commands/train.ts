/**
 * `anvil train`: the main job in this one process. Without a config, the built-in demo: the tiny
 * Llama-family model is warm-started on demonstrations of the built-in chain-add tool task (cached
 * after the first run), then trained by asynchronous RL through the real loop (rollout-manager ->
 * gateway -> inference-proxy -> Data Pool -> trainer -> weights.published), with held-out
 * evaluations pinned to versions. With `--config run.json`: your model, tasks, agent and knobs.
 */
import { randomUUID } from 'node:crypto';
import { engineInfo, setThreads } from '@anvil/engine';
import { checkRunConfig } from '../../config/run-files';
import { startInProcessServices } from '../../run/in-process/in-process-services';
import { startingModel } from '../../run/starting-model';
import { taskSetOf } from '../../run/task-set';
import { trainRun } from '../../run/train-run';
import { parseOptions, type Command } from '../command';
import { configOrExit } from './config-args';

export const trainCommand: Command = {
  name: 'train',
  summary: 'train a model with asynchronous RL in this process (the built-in demo without --config)',
  usage: 'anvil train [--config run.json]',
  help: `Runs the whole loop in one process: the five services on an in-process bus and an embedded
PostgreSQL, the embedded engine, your model (or the built-in tiny one), your tasks and agent.

options:
  --config FILE   the run configuration (docs/configuration.md); relative paths in it are taken
                  relative to the file. Without it: the built-in demo (tiny model, chain-add).

environment:
  ANVIL_SEED, ANVIL_MAIN_STEPS, ANVIL_DATA_DIR   override seed, budget.steps, dataDir

It prints a progress line while it runs, then held-out success before and after, the paths of
the HTML report (<dataDir>/reports/<run>/report.html) and the checkpoints, and the JSON summary
as its last line.

exit codes: 0 done, 1 failed, 3 stalled (no train batch for budget.stallSeconds; the message says
why), 4 every rollout failed (the first error is printed in full), 78 invalid configuration.`,
  async run(args) {
    const { values } = parseOptions('train', args, { config: { type: 'string' } });
    const cfg = configOrExit(checkRunConfig({ file: values.config, env: process.env }));
    if (typeof cfg === 'number') return cfg;
    const started = performance.now();
    const wall = () => (performance.now() - started) / 1000;
    const log = (l: string) => console.log(l);
    setThreads(cfg.engineThreads);
    const info = engineInfo();
    log(`anvil train: seed ${cfg.seed}, engine ${info.backend} (${info.reason}), ${cfg.engineThreads} thread(s) per engine call`);

    const start = await startingModel(cfg, log);
    const runId = `run-${new Date().toISOString().replace(/[:.]/g, '-')}-${randomUUID().slice(0, 6)}`;
    const taskSet = taskSetOf(cfg);
    const spec = taskSet.spec;
    const services = await startInProcessServices(cfg, {
      runId,
      model: start.model,
      // Every rollout of this run comes from the one task set: its context manager and agent kind name the mismatch split.
      mismatchSplit: `context=${spec.context?.kind ?? 'append_only'} agent=${spec.agent?.kind ?? 'white-box'}`,
    });
    try {
      const { exitCode, summary } = await trainRun({
        cfg,
        runId,
        services,
        taskSet,
        wall,
        log,
        warmStart: start.warmStart,
        startName: cfg.model !== 'tiny' && cfg.warmStart.enabled !== true ? 'the starting weights' : 'the warm start',
      });
      console.log(JSON.stringify(summary));
      return exitCode;
    } finally {
      await services.close();
    }
  },
};
