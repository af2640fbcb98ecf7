import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxUnavailableError } from '../errors';
import { cacheDir, INIT_SOURCE, isRoot, repoRoot, runtimeBase } from './paths';

export interface SandboxTools {
  /** bubblewrap, for the local backend (null when only the none backend was asked for). */
  bwrap: string | null;
  /** The compiled supervisor (native/sandbox-init.c), where every sandbox uid can read it. */
  init: string;
}

export interface EnsureToolsOptions {
  /** Install what is missing with apt-get (as root on Debian/Ubuntu); default true. */
  install?: boolean;
  /** Also bubblewrap (the local backend); default true. */
  local?: boolean;
  runtimeDir?: string;
  log?: (line: string) => void;
}

const SEARCH = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];

export function which(cmd: string): string | null {
  for (const dir of [...(process.env.PATH ?? '').split(':').filter(Boolean), ...SEARCH]) {
    const p = join(dir, cmd);
    try {
      if (statSync(p).isFile()) return p;
    } catch {
      /* not here */
    }
  }
  return null;
}

/**
 * Everything the sandboxes need, installed on first use the way tools/infra installs PostgreSQL:
 * bubblewrap from apt, the supervisor compiled from its C source into
 * the project's cache. Safe to call from several processes at once: apt-get waits for dpkg's
 * lock, and the compiled binary is renamed into place. Throws SandboxUnavailableError naming
 * what to do when something is missing and cannot be installed here.
 */
export function ensureSandboxTools(opts: EnsureToolsOptions = {}): SandboxTools {
  const install = opts.install ?? true;
  const local = opts.local ?? true;
  const log = opts.log ?? ((line: string) => process.stderr.write(`[sandbox] ${line}\n`));
  const packages: string[] = [];
  if (local && !which('bwrap')) packages.push('bubblewrap');
  if (!which('cc')) packages.push('gcc', 'libc6-dev');
  if (packages.length) aptInstall(packages, install, log);
  const init = buildInit(log);
  return {
    bwrap: local ? which('bwrap') : null,
    init: publishInit(init, opts.runtimeDir),
  };
}

function aptInstall(packages: string[], install: boolean, log: (line: string) => void): void {
  const how = `apt-get install ${packages.join(' ')}`;
  if (!install) throw new SandboxUnavailableError(`the sandbox needs ${packages.join(', ')}: run \`${how}\` (as root)`);
  if (!isRoot() || !which('apt-get'))
    throw new SandboxUnavailableError(
      `the sandbox needs ${packages.join(', ')} and cannot install them here (${isRoot() ? 'no apt-get' : 'not root'}): run \`${how}\` as root, or your distribution's equivalent`,
    );
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const apt = (args: string[]) =>
    spawnSync('apt-get', ['-o', 'DPkg::Lock::Timeout=600', ...args], { env, encoding: 'utf8', timeout: 900_000 });
  log(`installing ${packages.join(' ')} with apt-get`);
  let r = apt(['install', '-y', '--no-install-recommends', ...packages]);
  if (r.status !== 0) {
    // A fresh machine's package lists may be missing or stale.
    log('apt-get update');
    apt(['update']);
    r = apt(['install', '-y', '--no-install-recommends', ...packages]);
  }
  if (r.status !== 0)
    throw new SandboxUnavailableError(`${how} failed (exit ${r.status}): ${`${r.stdout ?? ''}${r.stderr ?? ''}`.trim().slice(-2000)}`);
}

/** Compiles the supervisor into .cache/sandbox/ unless a binary of this very source is there. */
function buildInit(log: (line: string) => void): string {
  const source = join(repoRoot(), INIT_SOURCE);
  const hash = createHash('sha256').update(readFileSync(source)).update(process.arch).digest('hex').slice(0, 16);
  const dir = join(cacheDir(), 'sandbox');
  const binary = join(dir, `anvil-sandbox-init-${hash}`);
  if (existsSync(binary)) return binary;
  mkdirSync(dir, { recursive: true });
  const tmp = `${binary}.${process.pid}.tmp`;
  log(`compiling ${INIT_SOURCE}`);
  const r = spawnSync('cc', ['-O2', '-Wall', '-Wextra', '-Werror', '-o', tmp, source], { encoding: 'utf8' });
  if (r.status !== 0) throw new SandboxUnavailableError(`cc could not compile ${INIT_SOURCE}:\n${r.stderr}`);
  chmodSync(tmp, 0o755);
  renameSync(tmp, binary);
  return binary;
}

/**
 * As root, a copy under the runtime dir: bwrap mounts it as the sandbox's uid, which may not reach
 * a checkout under a private home. Otherwise the cached binary is already ours to mount.
 */
function publishInit(binary: string, runtimeDir?: string): string {
  if (!isRoot()) return binary;
  const dir = join(runtimeBase(runtimeDir), 'bin');
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  const target = join(dir, binary.slice(binary.lastIndexOf('/') + 1));
  if (!existsSync(target)) {
    const tmp = `${target}.${process.pid}.tmp`;
    copyFileSync(binary, tmp);
    chmodSync(tmp, 0o755);
    renameSync(tmp, target);
  }
  return target;
}
