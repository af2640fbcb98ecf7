/**
 * What every `anvil` subcommand is: a name, a one-line summary for `anvil --help`, its own help
 * text, and a run function that returns the process's exit code. Commands with subcommands
 * (`anvil stack up|down|status`, `anvil model ...`) list them instead of running themselves.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';

export interface Command {
  name: string;
  /** One line: what it does (shown by `anvil --help`). */
  summary: string;
  /** `anvil <name> ...` with its arguments. */
  usage: string;
  /** The rest of `anvil <name> --help`: options, what it prints, where its output goes. */
  help: string;
  /** Subcommands (`anvil stack up`): the parent dispatches to them. */
  subcommands?: Command[];
  run?(args: string[]): Promise<number>;
}

/** Exit codes every command shares (the README's troubleshooting section lists them). */
export const EXIT = {
  ok: 0,
  /** The run or command failed (the error is printed). */
  failed: 1,
  /** Bad usage: unknown command or option. */
  usage: 2,
  /** RL ended early: no train batch for budget.stallSeconds (the report is written; the message says why). */
  stalled: 3,
  /** Every train rollout failed (agent, gateway or verifier errors): nothing could be trained. */
  rolloutsFailed: 4,
  /** The run configuration or its files are invalid (every problem is listed). */
  config: 78,
  /** Stopped by Ctrl-C or `anvil stack down`. */
  interrupted: 130,
} as const;

export class UsageError extends Error {
  override name = 'UsageError';
}

/** node:util's parseArgs, strict: an unknown option or a missing value is a UsageError naming the command. */
export function parseOptions<T extends NonNullable<ParseArgsConfig['options']>>(
  command: string,
  args: string[],
  options: T,
  allowPositionals = false,
) {
  try {
    return parseArgs({ args, options, strict: true, allowPositionals });
  } catch (e) {
    throw new UsageError(`anvil ${command}: ${(e as Error).message} (see anvil ${command} --help)`);
  }
}

/** `<path> --help` of one command (path: 'anvil', 'anvil stack', ...). */
export function helpOf(c: Command, path: string): string {
  const lines = [`usage: ${c.usage}`, '', c.summary];
  if (c.help) lines.push('', c.help.trimEnd());
  if (c.subcommands?.length) {
    lines.push('', 'commands:');
    const width = Math.max(...c.subcommands.map((s) => s.name.length));
    for (const s of c.subcommands) lines.push(`  ${s.name.padEnd(width)}  ${s.summary}`);
    lines.push('', `${path} <command> --help shows one command's options.`);
  }
  return lines.join('\n');
}

/** Runs `args` against a command tree: help, subcommand dispatch, usage errors; returns the exit code. */
export async function dispatch(c: Command, path: string, args: string[]): Promise<number> {
  const [first, ...rest] = args;
  if (first === '--help' || first === '-h' || first === 'help') {
    console.log(helpOf(c, path));
    return EXIT.ok;
  }
  if (c.subcommands) {
    const sub = c.subcommands.find((s) => s.name === first);
    if (!sub) {
      console.error(first === undefined ? helpOf(c, path) : `${path}: unknown command ${JSON.stringify(first)}\n\n${helpOf(c, path)}`);
      return EXIT.usage;
    }
    return dispatch(sub, `${path} ${sub.name}`, rest);
  }
  if (args.includes('--help') || args.includes('-h')) {
    console.log(helpOf(c, path));
    return EXIT.ok;
  }
  try {
    if (!c.run) throw new Error(`${path}: nothing to run`);
    return await c.run(args);
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(e.message);
      return EXIT.usage;
    }
    throw e;
  }
}
