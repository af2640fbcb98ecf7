import { spawn, type ChildProcess } from 'node:child_process';
import { SERVICE_NODE_FLAGS } from '@anvil/config';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Runs a built service (dist/apps/<app>/src/main.js) as a separate process, the way it runs
 * in production, and exposes what tests need: its port (it binds port 0 and logs the real
 * one), its output, and a clean SIGTERM stop with the exit code.
 */
export interface ServiceProcess {
  app: string;
  port: number;
  baseUrl: string;
  child: ChildProcess;
  output(): string;
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<number | null>;
}

export const repoRoot = join(__dirname, '..', '..', '..');

export function builtMain(app: string): string {
  const main = join(repoRoot, 'dist', 'apps', app, 'src', 'main.js');
  if (!existsSync(main)) throw new Error(`${main} is missing: run \`npm run build\` first (npm test does)`);
  return main;
}

/** `nodeArgs`: flags for node itself (e.g. --cpu-prof, which NODE_OPTIONS does not accept). */
export function runBuilt(
  app: string,
  env: NodeJS.ProcessEnv,
  nodeArgs: readonly string[] = [],
): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const child = spawn(process.execPath, [...SERVICE_NODE_FLAGS, ...nodeArgs, builtMain(app)], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout?.on('data', (d) => (out += d));
  child.stderr?.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => out, exited };
}

export async function startService(
  app: string,
  env: NodeJS.ProcessEnv,
  timeoutMs = 60_000,
  nodeArgs: readonly string[] = [],
): Promise<ServiceProcess> {
  const { child, output, exited } = runBuilt(app, { PORT: '0', ...env }, nodeArgs);
  const deadline = Date.now() + timeoutMs;
  let port = 0;
  while (!port) {
    const match = /"msg":"listening"[^\n]*"port":(\d+)/.exec(output());
    if (match) port = Number(match[1]);
    else if (child.exitCode !== null) throw new Error(`${app} exited with ${child.exitCode} before listening:\n${output()}`);
    else if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`${app} did not listen within ${timeoutMs} ms:\n${output()}`);
    } else await new Promise((r) => setTimeout(r, 50));
  }
  return {
    app,
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    child,
    output,
    stop: async (signal = 'SIGTERM', stopTimeoutMs = 20_000) => {
      if (child.exitCode !== null) return child.exitCode;
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), stopTimeoutMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

export async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000, intervalMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (err) {
      lastError = err;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${(lastError as Error).message}` : ''}`);
}
