import { existsSync, lstatSync, mkdirSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { SandboxUnavailableError } from '../errors';

/** The supervisor's C source, relative to the repository root. */
export const INIT_SOURCE = 'libs/sandbox/native/sandbox-init.c';

/** The repository root: the nearest directory upwards (from this file, then the cwd) holding the supervisor's source. */
export function repoRoot(): string {
  for (const start of [__dirname, process.cwd()]) {
    let dir = resolve(start);
    for (;;) {
      if (existsSync(join(dir, INIT_SOURCE))) return dir;
      const up = dirname(dir);
      if (up === dir) break;
      dir = up;
    }
  }
  throw new SandboxUnavailableError(`cannot find ${INIT_SOURCE} above ${__dirname} or ${process.cwd()}: run from the Anvil repository`);
}

/** Git-ignored cache for what the project builds or installs itself (ANVIL_CACHE_DIR overrides, as for tools/infra). */
export function cacheDir(): string {
  return process.env.ANVIL_CACHE_DIR ? resolve(process.env.ANVIL_CACHE_DIR) : join(repoRoot(), '.cache');
}

export const isRoot = (): boolean => typeof process.getuid === 'function' && process.getuid() === 0;

/**
 * Per-sandbox runtime state (the relay's socket, the generated /etc files, the uid locks, the
 * supervisor binary the sandboxes mount). As root it is /run/anvil-sandbox: every sandbox uid must
 * be able to reach it, and /run is neither world-writable nor under a private home. Otherwise
 * a directory of the user's own under the temp dir, refused if somebody else made it first.
 */
export function runtimeBase(override?: string): string {
  const dir = override ?? (isRoot() ? '/run/anvil-sandbox' : join(tmpdir(), `anvil-sandbox-${process.getuid?.() ?? 'user'}`));
  mkdirSync(dir, { recursive: true, mode: 0o711 });
  const s = lstatSync(dir);
  const uid = process.getuid?.();
  if (!s.isDirectory() || (uid !== undefined && s.uid !== uid) || (s.mode & 0o022) !== 0)
    throw new SandboxUnavailableError(
      `${dir} must be a directory of uid ${uid} writable by nobody else (mode ${(s.mode & 0o777).toString(8)})`,
    );
  return dir;
}

/**
 * The first directory above `path` that `uid`/`gid` cannot pass through (bwrap resolves mount
 * sources as the sandbox's uid), or, with `readLeaf`, `path` itself when it cannot read it; null
 * when nothing is in the way.
 */
export function traversableBy(path: string, uid: number, gid: number, readLeaf = false): string | null {
  if (readLeaf) {
    const s = statSync(path);
    const bits = s.uid === uid ? s.mode >> 6 : s.gid === gid ? s.mode >> 3 : s.mode;
    if (!(bits & 0o4) || (s.isDirectory() && !(bits & 0o1))) return path;
  }
  let dir = dirname(resolve(path));
  for (;;) {
    const s = statSync(dir);
    const ok = s.uid === uid ? s.mode & 0o100 : s.gid === gid ? s.mode & 0o010 : s.mode & 0o001;
    if (!ok) return dir;
    const up = dirname(dir);
    if (up === dir) return null;
    dir = up;
  }
}
