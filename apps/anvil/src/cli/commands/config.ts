/**
 * `anvil config check|docs`: check a run configuration and the files it names without starting
 * anything, and render the configuration reference from the schema.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderConfigReference } from '../../config/reference';
import { checkRunConfig } from '../../config/run-files';
import { repoRoot } from '../../repo-root';
import { EXIT, parseOptions, type Command } from '../command';
import { configOrExit } from './config-args';

const checkCommand: Command = {
  name: 'check',
  summary: 'check a run configuration and the files it names; print it with every default filled in',
  usage: 'anvil config check [--config run.json]',
  help: `Checks the knobs (types, ranges, combinations) and the files (the model directory, the task
JSONL, the agent's and verifier's commands, the task environment) exactly as \`anvil train\` does
before it starts, and lists every problem at once (exit 78). When all is well it prints the
resolved configuration as JSON.`,
  async run(args) {
    const { values } = parseOptions('config check', args, { config: { type: 'string' } });
    const cfg = configOrExit(checkRunConfig({ file: values.config, env: process.env }));
    if (typeof cfg === 'number') return cfg;
    console.log(JSON.stringify(cfg, null, 2));
    return EXIT.ok;
  },
};

const docsCommand: Command = {
  name: 'docs',
  summary: 'print the configuration reference (docs/configuration.md) rendered from the schema',
  usage: 'anvil config docs [--write]',
  help: `options:
  --write   write it to docs/configuration.md instead of printing it`,
  async run(args) {
    const { values } = parseOptions('config docs', args, { write: { type: 'boolean', default: false } });
    const md = renderConfigReference();
    if (values.write) {
      const file = join(repoRoot, 'docs', 'configuration.md');
      writeFileSync(file, md);
      console.log(`wrote ${file}`);
    } else process.stdout.write(md);
    return EXIT.ok;
  },
};

export const configCommand: Command = {
  name: 'config',
  summary: 'the run configuration: check a file, print the reference',
  usage: 'anvil config <check|docs> [options]',
  help: '',
  subcommands: [checkCommand, docsCommand],
};
