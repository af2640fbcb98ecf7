// Small helpers shared by tools/infra/*.mjs. Plain Node built-ins only: these scripts run before
// any TypeScript build (and before `npm ci` finished, in the case of the package-free ones).
import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, statSync, unlinkSync, writeSync, readSync } from 'node:fs';
import { connect } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const infraDir = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(infraDir, '..', '..');
/** Git-ignored cache for downloads and local server state. ANVIL_CACHE_DIR overrides (absolute path). */
export const cacheDir = process.env.ANVIL_CACHE_DIR ? resolve(process.env.ANVIL_CACHE_DIR) : join(repoRoot, '.cache');

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Progress messages go to stderr so that stdout stays machine-readable (urls, env lines). */
export function log(tag, msg) {
  if (process.env.ANVIL_INFRA_QUIET === '1') return;
  process.stderr.write(`[${tag}] ${msg}\n`);
}

export function isMain(importMetaUrl) {
  return Boolean(process.argv[1]) && importMetaUrl === pathToFileURL(resolve(process.argv[1])).href;
}

export function parsePort(value, fallback, name) {
  if (value === undefined || value === '') return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 65535) throw new Error(`${name} must be a TCP port, got ${JSON.stringify(value)}`);
  return n;
}

/** True when `pid` is a live (non-zombie) process. */
export function isAlive(pid) {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (e) {
    if (e.code !== 'EPERM') return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    if (state === 'Z' || state === 'X') return false;
  } catch {
    // no /proc (not Linux): trust kill(0)
  }
  return true;
}

/** The NUL-separated command line of a process, joined by spaces ('' when unknown). */
export function cmdlineOf(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
  } catch {
    return '';
  }
}

export function readPid(file) {
  try {
    const n = Number.parseInt(readFileSync(file, 'utf8').trim(), 10);
    return Number.isInteger(n) && n > 0 ? n : null;
  } catch {
    return null;
  }
}

/** Resolves true when something accepts TCP connections on host:port within timeoutMs. */
export function canConnect(port, host = '127.0.0.1', timeoutMs = 1000) {
  return new Promise((resolvePromise) => {
    const sock = connect({ port, host });
    const done = (ok) => {
      sock.removeAllListeners();
      sock.destroy();
      resolvePromise(ok);
    };
    sock.setTimeout(timeoutMs, () => done(false));
    sock.once('connect', () => done(true));
    sock.once('error', () => done(false));
  });
}

/** Last `bytes` of a file as text ('' when missing). */
export function tailFile(file, bytes = 4000) {
  try {
    const size = statSync(file).size;
    const fd = openSync(file, 'r');
    try {
      const len = Math.min(size, bytes);
      const buf = Buffer.alloc(len);
      readSync(fd, buf, 0, len, size - len);
      return buf.toString('utf8');
    } finally {
      closeSync(fd);
    }
  } catch {
    return '';
  }
}

/**
 * Runs a command synchronously; returns {status, stdout, stderr}. Throws (with the output in the
 * message) when it exits non-zero, unless `allowFail`.
 */
export function run(cmd, args, { allowFail = false, cwd, env, input, timeoutMs, stdio } = {}) {
  const r = spawnSync(cmd, args, {
    cwd,
    env: env ?? process.env,
    input,
    encoding: 'utf8',
    timeout: timeoutMs,
    maxBuffer: 64 * 1024 * 1024,
    stdio: stdio ?? ['pipe', 'pipe', 'pipe'],
  });
  if (r.error && !allowFail) throw new Error(`${cmd} ${args.join(' ')}: ${r.error.message}`);
  const out = { status: r.status ?? (r.signal ? 128 : 1), stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
  if (out.status !== 0 && !allowFail) {
    throw new Error(`${cmd} ${args.join(' ')} exited with ${out.status}\n${(out.stdout + out.stderr).trim().slice(-4000)}`);
  }
  return out;
}

export function which(cmd) {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (!dir) continue;
    const p = join(dir, cmd);
    try {
      if (statSync(p).isFile()) return p;
    } catch {
      // not here
    }
  }
  return null;
}

export const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

let aptUpdated = false;
/** apt-get install (as root only) of the given Debian packages, non-interactively. */
export function aptInstall(packages, tag, extraArgs = []) {
  if (!isRoot()) throw new Error(`${packages.join(' ')} missing and not root: install them (apt-get install ${packages.join(' ')})`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  if (!aptUpdated) {
    log(tag, 'apt-get update');
    run('apt-get', ['update'], { env, timeoutMs: 600_000 });
    aptUpdated = true;
  }
  log(tag, `apt-get install ${packages.join(' ')}`);
  run('apt-get', ['install', '-y', '--no-install-recommends', ...extraArgs, ...packages], { env, timeoutMs: 900_000 });
}

/**
 * Cross-process mutex on a lock file (O_EXCL create, holder pid inside, stale locks of dead
 * holders are broken). Serialises start/stop/install of the same server between processes.
 */
export async function withLock(lockFile, fn, { timeoutMs = 10 * 60_000, tag = 'infra' } = {}) {
  mkdirSync(dirname(lockFile), { recursive: true });
  const deadline = Date.now() + timeoutMs;
  let announced = false;
  for (;;) {
    try {
      const fd = openSync(lockFile, 'wx');
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      break;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
    }
    const holder = readPid(lockFile);
    if (holder === null) {
      // Being written right now, or garbage left by a crash mid-write: give it a moment.
      let age = 0;
      try {
        age = Date.now() - statSync(lockFile).mtimeMs;
      } catch {
        continue;
      }
      if (age > 5000) safeUnlink(lockFile);
    } else if (holder !== process.pid && !isAlive(holder)) {
      log(tag, `breaking stale lock ${lockFile} (pid ${holder} is gone)`);
      safeUnlink(lockFile);
      continue;
    } else if (!announced) {
      log(tag, `waiting for lock ${lockFile} held by pid ${holder}`);
      announced = true;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for lock ${lockFile}`);
    await sleep(150);
  }
  try {
    return await fn();
  } finally {
    if (readPid(lockFile) === process.pid) safeUnlink(lockFile);
  }
}

export function safeUnlink(file) {
  try {
    unlinkSync(file);
  } catch {
    // already gone
  }
}

/** Sends SIGTERM, waits up to graceMs for exit, then SIGKILL. Resolves true if it had to kill. */
export async function terminate(pid, graceMs, tag) {
  if (!isAlive(pid)) return false;
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    return false;
  }
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    if (!isAlive(pid)) return false;
    await sleep(100);
  }
  log(tag, `pid ${pid} ignored SIGTERM for ${graceMs} ms, sending SIGKILL`);
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // gone meanwhile
  }
  for (let i = 0; i < 50 && isAlive(pid); i++) await sleep(100);
  return true;
}

export const exists = (p) => existsSync(p);

/** Splits argv into {positional[], flags:{name:value|true}} for the simple CLIs here. */
export function parseArgs(argv) {
  const positional = [];
  const flags = {};
  for (const a of argv) {
    if (a.startsWith('--')) {
      const eq = a.indexOf('=');
      if (eq > 0) flags[a.slice(2, eq)] = a.slice(eq + 1);
      else flags[a.slice(2)] = true;
    } else positional.push(a);
  }
  return { positional, flags };
}
