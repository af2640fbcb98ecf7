/**
 * The host's git, run on trees an agent controls: never the user's or the system's config, no
 * hooks, no prompts, and a git directory of our own outside the tree when there is one (so the
 * agent can neither see nor rewrite the baseline its diff is taken against).
 */
import { spawn } from 'node:child_process';

export class GitError extends Error {
  override readonly name = 'GitError';
}

export const SAFE_CONFIG = [
  '-c',
  'core.hooksPath=/dev/null',
  '-c',
  'safe.directory=*',
  '-c',
  'core.autocrlf=false',
  '-c',
  'core.symlinks=true',
  '-c',
  'commit.gpgSign=false',
  '-c',
  'user.name=anvil',
  '-c',
  'user.email=anvil@localhost',
];

export interface GitRun {
  stdout: Buffer;
  stderr: string;
  code: number | null;
}

/** git's environment: no user or system config, no prompt, no repository found above the directory it is given. */
export function gitEnv(opts: { gitDir?: string; workTree?: string }): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: '/nonexistent',
    LANG: 'C',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_TERMINAL_PROMPT: '0',
    GIT_CEILING_DIRECTORIES: '/',
    ...(opts.gitDir ? { GIT_DIR: opts.gitDir } : {}),
    ...(opts.workTree ? { GIT_WORK_TREE: opts.workTree } : {}),
  };
}

/** Runs git with `args` (stdin optional); resolves with its output whatever the exit code. */
export function git(args: string[], opts: { cwd: string; gitDir?: string; workTree?: string; input?: Buffer | string }): Promise<GitRun> {
  return new Promise((resolveRun, reject) => {
    const env = gitEnv(opts);
    const child = spawn('git', [...SAFE_CONFIG, ...args], { cwd: opts.cwd, env, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => (err += d.toString('utf8')));
    child.on('error', (e) => reject(new GitError(`git ${args[0]}: ${e.message}`)));
    child.on('close', (code) => resolveRun({ stdout: Buffer.concat(out), stderr: err, code }));
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.input ?? '');
  });
}

/** Runs git and fails with its stderr on a non-zero exit. */
export async function gitOk(args: string[], opts: Parameters<typeof git>[1], what: string): Promise<Buffer> {
  const r = await git(args, opts);
  if (r.code !== 0) throw new GitError(`${what}: git ${args[0]} exited ${r.code}: ${r.stderr.trim().slice(0, 1000)}`);
  return r.stdout;
}
