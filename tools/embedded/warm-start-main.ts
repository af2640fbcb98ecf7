/**
 * `npm run warm-start [-- --config run.json]`: builds (or finds in the cache) the main job's warm
 * start for a run configuration and prints its directory. `npm run main` does the same as its
 * first phase, so running this first only moves that time out of the main job.
 */
import { chainAddConfigOf, loadRunConfigOrExit } from './run-config';
import { warmStart } from './warm-start';

async function main(): Promise<void> {
  const cfg = loadRunConfigOrExit(process.argv.slice(2), process.env);
  const task = chainAddConfigOf(cfg);
  const ws = await warmStart({ ...cfg.warmStart, task, dataDir: cfg.dataDir }, (l) => console.log(l));
  console.log(
    `${ws.cached ? 'cached' : 'built'}: ${ws.dir} (${ws.steps} SFT steps x ${cfg.warmStart.tasksPerStep} demonstrations, ${ws.seconds.toFixed(0)} s to build)`,
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
