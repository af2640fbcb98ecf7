/**
 * `anvil warm-start`: builds (or finds in the cache) the warm start a run configuration starts
 * from and prints its directory. `anvil train` does the same as its first phase, so running this
 * first only moves that time out of the run (and gives a checkpoint to serve elsewhere).
 */
import { chainAddConfigOf } from '../../config/run-config';
import { checkRunConfig } from '../../config/run-files';
import { warmStart } from '../../warm-start/warm-start';
import { EXIT, parseOptions, type Command } from '../command';
import { configOrExit } from './config-args';

export const warmStartCommand: Command = {
  name: 'warm-start',
  summary: "build (or find in the cache) the built-in task's supervised warm start and print its directory",
  usage: 'anvil warm-start [--config run.json]',
  help: `Supervised fine-tuning on generated demonstrations of the built-in chain-add task until
warmStart.targetPassRate of the validation tasks pass (docs/configuration.md, warmStart.*). The
result is cached under <dataDir>/warm-start/<key>/, keyed by everything that determines it, so
every run with the same settings reuses it.

options:
  --config FILE   the run configuration whose warmStart and task knobs to use`,
  async run(args) {
    const { values } = parseOptions('warm-start', args, { config: { type: 'string' } });
    const cfg = configOrExit(checkRunConfig({ file: values.config, env: process.env }));
    if (typeof cfg === 'number') return cfg;
    if (cfg.task.set !== 'chain-add') {
      console.error("anvil warm-start: the warm start trains on the built-in task's demonstrations (task.set 'chain-add')");
      return EXIT.config;
    }
    const ws = await warmStart(
      { ...cfg.warmStart, task: chainAddConfigOf(cfg), dataDir: cfg.dataDir, ...(cfg.model !== 'tiny' ? { base: cfg.model } : {}) },
      (l) => console.log(l),
    );
    console.log(
      `${ws.cached ? 'cached' : 'built'}: ${ws.dir} (${ws.steps} SFT steps x ${cfg.warmStart.tasksPerStep} demonstrations, ${ws.seconds.toFixed(0)} s to build)`,
    );
    return EXIT.ok;
  },
};
