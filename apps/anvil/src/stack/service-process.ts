/**
 * One built service (dist/apps/<app>/src/main.js) as its own process, its output appended to a log
 * file under the run directory (never the terminal). It runs in a process group of its own, so a
 * Ctrl-C in the terminal reaches only the stack command, which then stops the services in order.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SERVICE_NODE_FLAGS } from '@anvil/config';
import type { App, Env } from '../config/service-settings';
import { repoRoot } from '../repo-root';

export interface ServiceHandle {
  app: App;
  pid: number;
  port: number;
  url: string;
  logFile: string;
}

export interface RunningService extends ServiceHandle {
  child: ChildProcess;
  exited: Promise<number | null>;
}

/** A service gets SHUTDOWN_TIMEOUT_MS (15 s by default) to stop on its own; past this it is killed. */
export const STOP_TIMEOUT_MS = 20_000;

export const builtMain = (app: App) => join(repoRoot, 'dist', 'apps', app, 'src', 'main.js');

/** Starts `app` and resolves once it listens (its "listening" log line names the port it bound). */
export async function startServiceProcess(app: App, env: Env, logFile: string, timeoutMs = 120_000): Promise<RunningService> {
  const main = builtMain(app);
  if (!existsSync(main)) throw new Error(`${main} is missing: run \`npm run build\``);
  const fd = openSync(logFile, 'a');
  let child: ChildProcess;
  try {
    // PATH only from this environment: a service sees its own variables and nothing else of the caller's.
    child = spawn(process.execPath, [...SERVICE_NODE_FLAGS, main], {
      cwd: repoRoot,
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', fd, fd],
      detached: true,
    });
  } finally {
    closeSync(fd);
  }
  const pid = child.pid;
  if (pid === undefined) throw new Error(`${app} could not be started (no pid)`);
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 + signalNumber(signal) : null))),
  );
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const port = listeningPort(logFile, pid);
    if (port !== null) return { app, pid, port, url: `http://127.0.0.1:${port}`, logFile, child, exited };
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(
        `${app} exited (${child.exitCode ?? child.signalCode}) before it listened; the end of ${logFile}:\n${tail(logFile, 30)}`,
      );
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`${app} did not listen within ${timeoutMs / 1000} s; the end of ${logFile}:\n${tail(logFile, 30)}`);
    }
    await sleep(100);
  }
}

/** The port of this pid's "listening" line in the log (service-kit logs it once bound), or null. */
function listeningPort(logFile: string, pid: number): number | null {
  const text = readFileSync(logFile, 'utf8');
  for (const line of text.split('\n')) {
    if (!line.includes('"msg":"listening"')) continue;
    try {
      const l = JSON.parse(line) as { port?: number; pid?: number };
      if (typeof l.port === 'number' && l.pid === pid) return l.port;
    } catch {
      // a partial line: read again next time
    }
  }
  return null;
}

export function tail(file: string, lines: number): string {
  if (!existsSync(file)) return '';
  return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
}

/** Resolves once GET /readyz answers 200; throws with the last answer (it names the failing check) after timeoutMs. */
export async function waitReady(s: ServiceHandle & { exited?: Promise<number | null> }, timeoutMs = 180_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  let gone: number | null | undefined;
  void s.exited?.then((c) => (gone = c));
  while (Date.now() < deadline) {
    if (gone !== undefined)
      throw new Error(`${s.app} exited (${gone}) before it was ready; the end of ${s.logFile}:\n${tail(s.logFile, 30)}`);
    try {
      const r = await fetch(`${s.url}/readyz`, { signal: AbortSignal.timeout(5_000) });
      if (r.status === 200) return;
      last = `${r.status} ${await r.text()}`;
    } catch (e) {
      last = (e as Error).message;
    }
    await sleep(200);
  }
  throw new Error(`${s.app} was not ready within ${timeoutMs / 1000} s: ${last}`);
}

/**
 * SIGTERM (the service's graceful stop: it drains, hands back or commits in-flight work, and exits
 * 0), then SIGKILL after `timeoutMs`. Works on a process this one did not start (`down` from another
 * terminal): it then polls for the pid to go. Returns the exit code when known.
 */
export async function stopProcess(pid: number, timeoutMs: number, exited?: Promise<number | null>): Promise<number | null | 'killed'> {
  if (!alive(pid)) return exited ? await exited : null;
  signal(pid, 'SIGTERM');
  const deadline = Date.now() + timeoutMs;
  if (exited) {
    const code = await Promise.race([exited, sleep(timeoutMs).then(() => 'timeout' as const)]);
    if (code !== 'timeout') return code;
  } else {
    while (alive(pid) && Date.now() < deadline) await sleep(100);
    if (!alive(pid)) return null;
  }
  signal(pid, 'SIGKILL');
  if (exited) await exited;
  return 'killed';
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The command line of a live pid (Linux /proc), or null: `down` only signals pids that are still the processes it recorded. */
export function commandLine(pid: number): string | null {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
  } catch {
    return null;
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

function signalNumber(sig: NodeJS.Signals): number {
  return ({ SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 } as Record<string, number>)[sig] ?? 0;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
