/**
 * `npm run warm-start [-- --config run.json]`: builds (or finds in the cache) the main job's warm
 * start for a run configuration and prints its directory. `npm run main` does the same as its
 * first phase, so running this first only moves that time out of the main job.
 */
import { setThreads } from '@anvil/engine';
import { loadRunConfig, RunConfigError } from './run-config';
import { warmStart } from './warm-start';

async function main(): Promise<void> {
  let cfg;
  try {
    cfg = loadRunConfig(process.argv.slice(2), process.env);
  } catch (e) {
    if (e instanceof RunConfigError) {
      console.error(e.message);
      process.exit(78);
    }
    throw e;
  }
  setThreads(Math.max(cfg.engineThreads, 2));
  const task = { k: { min: cfg.task.kMin, max: cfg.task.kMax }, maxOperand: cfg.task.maxOperand, prompt: cfg.task.prompt };
  const ws = await warmStart({ ...cfg.warmStart, seed: cfg.seed, task, dataDir: cfg.dataDir }, (l) => console.log(l));
  console.log(`${ws.cached ? 'cached' : 'built'}: ${ws.dir} (${ws.steps} SFT steps x ${cfg.warmStart.tasksPerStep} demonstrations, ${ws.seconds.toFixed(0)} s to build)`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
