/**
 * The `anvil` command line: `anvil train`, `anvil stack up|down|status`, `anvil warm-start`,
 * `anvil config check|docs`, ... (`anvil --help` lists them; each has its own --help).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { dispatch, EXIT, type Command } from './cli/command';
import { COMMANDS } from './cli/commands';
import { repoRoot } from './repo-root';

export const anvil: Command = {
  name: 'anvil',
  summary: 'Asynchronous reinforcement learning for LLM agents on long multi-turn trajectories.',
  usage: 'anvil <command> [options]',
  help: `Start with \`anvil train\`: the built-in demo (a tiny model learns a multi-turn tool task on this
machine in minutes). \`anvil train --config run.json\` trains your model with your tasks and agent;
docs/configuration.md lists every knob. README.md is the guide.

options:
  -h, --help     this help (each command has its own: anvil <command> --help)
  -v, --version  the version`,
  subcommands: COMMANDS,
};

export async function main(argv: string[]): Promise<number> {
  if (argv[0] === '--version' || argv[0] === '-v') {
    console.log((JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version);
    return EXIT.ok;
  }
  return dispatch(anvil, 'anvil', argv);
}

/** Runs the command line and exits with its code (an unexpected error: its stack, exit 1). */
export function runCli(argv: string[]): void {
  main(argv).then(
    (code) => process.exit(code),
    (err: unknown) => {
      console.error(err instanceof Error ? (err.stack ?? err.message) : err);
      process.exit(EXIT.failed);
    },
  );
}

// `node dist/apps/anvil/src/main.js ...` (a deployment without tsx); bin/anvil.cjs calls runCli itself.
if (require.main === module) runCli(process.argv.slice(2));
