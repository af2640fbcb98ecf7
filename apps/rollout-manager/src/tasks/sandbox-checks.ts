import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, isAbsolute, join, resolve } from 'node:path';
import { blackBoxLaunch, type BlackBoxSpec } from '../agents/black-box-launch';
import { defaultAgentsDir } from '../agents/presets/install';
import { presetProblem } from '../agents/presets/registry';
import { pathInside, unreadableBySandbox, visibleInside } from '../sandbox/mounts';
import type { StoredTask } from './jsonl';
import type { AgentSpec, VerifierSpec } from './task-set';

/**
 * What a task set's programs need of this machine, checked when it is loaded (and by `anvil
 * config check`) so that a run does not find out at its first rollout: the agent's directory, its
 * read-only paths (present, readable by a sandbox's uid, not part of the system a sandbox mounts
 * itself), its command (there, and inside the sandbox), each task's workspace snapshot, each
 * command verifier's read-only paths and command. Every problem at once, each naming what to do.
 */

/** Host directories a local sandbox mounts (or hides) itself: a read-only path may not be one of them. */
const SYSTEM = ['/usr', '/bin', '/sbin', '/lib', '/lib64', '/etc', '/proc', '/dev', '/sys', '/run/anvil', '/home/agent'];
const overlapsSystem = (p: string) => p === '/' || SYSTEM.some((d) => p === d || p.startsWith(`${d}/`) || d.startsWith(`${p}/`));
const isRoot = () => process.getuid?.() === 0;

const executable = (p: string) => {
  try {
    accessSync(p, constants.X_OK);
    return statSync(p).isFile();
  } catch {
    return false;
  }
};
const isDirectory = (p: string) => {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
};

/** Problems of read-only paths a sandbox is to mount (`what` names the field). */
function readOnlyPathProblems(what: string, paths: string[], local: boolean): string[] {
  const problems: string[] = [];
  for (const p of paths) {
    if (overlapsSystem(p))
      problems.push(`${what}: ${p} is part of the system a sandbox mounts (or hides) itself: name a directory of your own`);
    else if (!exists(p)) problems.push(`${what}: ${p} does not exist`);
    else if (local && isRoot()) {
      const why = unreadableBySandbox(p);
      if (why)
        problems.push(
          `${what}: ${why}: a sandbox runs as a uid of its own, so give others read access (chmod o+rX) or use another directory`,
        );
    }
  }
  return problems;
}

const exists = (p: string) => {
  try {
    statSync(p);
    return true;
  } catch {
    return false;
  }
};

/** Whether argv[0] can be started where the agent runs: on the host, and for a local sandbox from inside it. */
function commandProblem(what: string, argv0: string, cwd: string, pathEnv: string | undefined, mounts: string[] | null): string | null {
  if (argv0.includes('/')) {
    const file = isAbsolute(argv0) ? argv0 : resolve(cwd, argv0);
    if (!executable(file)) return `${what}: ${argv0} is not an executable file (relative to ${cwd})`;
    if (mounts && !visibleInside(file, mounts))
      return `${what}: ${file} is outside what its sandbox shows: add its directory to readOnlyPaths`;
    return null;
  }
  const path = mounts ? pathInside(pathEnv, mounts) : (pathEnv ?? '');
  if (path.split(delimiter).some((d) => d !== '' && executable(join(d, argv0)))) return null;
  return mounts
    ? `${what}: ${argv0} is not on the PATH inside its sandbox (${path}): add the directory holding it to readOnlyPaths, or name its full path`
    : `${what}: ${argv0} is not on PATH`;
}

/**
 * Arguments naming a file of this machine (absolute paths that exist) that the sandbox does not
 * show: `node /home/me/verifier.mjs` would fail at every rollout with "cannot find module".
 */
function hiddenArgumentProblems(what: string, args: readonly string[], mounts: string[]): string[] {
  return args
    .filter((a) => isAbsolute(a) && exists(a) && !visibleInside(a, mounts))
    .map((a) => `${what}: its argument ${a} is outside what its sandbox shows: add its directory to readOnlyPaths`);
}

/** A black-box agent's problems (`what` prefixes each: 'agent' in a task set, 'task.agent' in a run config). */
export function blackBoxAgentProblems(agent: BlackBoxSpec, repoRoot: string, what = 'agent'): string[] {
  // A preset not installed has nothing else worth checking yet: say how to install it.
  const preset = agent.preset ? presetProblem(agent.preset, defaultAgentsDir()) : null;
  if (preset) return [`${what}.preset: ${preset}`];
  const launch = blackBoxLaunch(agent, {}, repoRoot);
  if (!isDirectory(launch.cwd)) return [`${what}.cwd: ${launch.cwd} does not exist`];
  const local = launch.sandbox === 'local';
  const problems = readOnlyPathProblems(`${what}.readOnlyPaths`, launch.readOnlyPaths, local);
  const command = commandProblem(
    `${what}.command`,
    launch.argv[0],
    launch.cwd,
    launch.env.PATH ?? process.env.PATH,
    // The workspace is made per rollout: a command there is the task's (its snapshot), not checkable here.
    local ? launch.readOnlyPaths : null,
  );
  if (command) problems.push(command);
  if (local) problems.push(...hiddenArgumentProblems(`${what}.command`, launch.argv.slice(1), launch.readOnlyPaths));
  return problems;
}

/** A task's workspace snapshot and setup: only for black-box agents, and the snapshot a directory that exists. */
export function taskWorkspaceProblems(task: Pick<StoredTask, 'id' | 'workspace' | 'setup'>, agent: AgentSpec, repoRoot: string): string[] {
  if (task.workspace === undefined && task.setup === undefined) return [];
  if (agent.kind !== 'black-box')
    return [`task ${task.id}: workspace and setup are for black-box agents (this task set's agent is ${agent.kind})`];
  const dir = blackBoxLaunch(agent, task, repoRoot).workspaceFrom;
  if (dir !== null && !isDirectory(dir))
    return [
      `task ${task.id}: its workspace ${dir} (the repository snapshot copied into each rollout's workspace) is not a directory: ` +
        `give an existing directory, absolute or relative to the agent's cwd`,
    ];
  return [];
}

/** A command verifier's read-only paths and its command as its sandbox sees it (relative to the manager's directory). */
export function commandVerifierProblems(v: VerifierSpec, repoRoot: string, what = 'verifier'): string[] {
  if (v.kind !== 'command') return [];
  const local = v.sandbox === 'local';
  const readOnlyPaths = v.readOnlyPaths.map((p) => resolve(repoRoot, p));
  const problems = readOnlyPathProblems(`${what}.readOnlyPaths`, readOnlyPaths, local);
  const command = commandProblem(`${what}.command`, v.command[0], repoRoot, process.env.PATH, local ? readOnlyPaths : null);
  if (command) problems.push(command);
  if (local) problems.push(...hiddenArgumentProblems(`${what}.command`, v.command.slice(1), readOnlyPaths));
  return problems;
}
