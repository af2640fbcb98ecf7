import { realpathSync, statSync } from 'node:fs';
import { delimiter, dirname, resolve } from 'node:path';

/** What a local sandbox shows of the host's own directories (read-only), besides its workspace and read-only paths. */
const SYSTEM_DIRS = ['/usr', '/bin', '/sbin', '/lib', '/lib64'];

const within = (path: string, dir: string) => path === dir || path.startsWith(dir.endsWith('/') ? dir : `${dir}/`);

/** Whether a host path is inside a local sandbox: under a system directory or one of its mounts (workspace, read-only paths). */
export function visibleInside(path: string, mounts: readonly string[]): boolean {
  return [...SYSTEM_DIRS, ...mounts].some((m) => within(path, m));
}

/**
 * The PATH a local sandbox gets when its agent names none: the manager's entries that exist in
 * there (so a venv the agent's read-only paths include still comes first), the system's otherwise.
 */
export function pathInside(hostPath: string | undefined, mounts: readonly string[]): string {
  const kept = (hostPath ?? '').split(delimiter).filter((d) => d !== '' && d.startsWith('/') && visibleInside(d, mounts));
  return kept.length ? [...new Set(kept)].join(delimiter) : '/usr/local/bin:/usr/bin:/bin';
}

/**
 * Where a sandboxed program starts: its own directory when the sandbox has it (it is mounted, or
 * lies above a mount, which the sandbox creates), so its relative paths mean what they say; else
 * its workspace.
 */
export function cwdInside(cwd: string, mounts: readonly string[], workspace: string): string {
  return mounts.some((m) => within(cwd, m) || within(m, cwd)) ? cwd : workspace;
}

/**
 * Why a host path cannot be mounted into a local sandbox run by root: a sandbox runs as a uid of
 * its own, neither owner nor group of the host's files, so every directory above the path must be
 * searchable by others and the path itself readable by them; null when it can be.
 */
export function unreadableBySandbox(path: string): string | null {
  let abs: string;
  let st;
  try {
    abs = realpathSync(resolve(path));
    st = statSync(abs);
  } catch {
    return `${resolve(path)} does not exist`;
  }
  const leafBits = st.isDirectory() ? 0o005 : 0o004;
  if ((st.mode & leafBits) !== leafBits) return `${abs} is not readable by other users (mode ${(st.mode & 0o777).toString(8)})`;
  for (let dir = dirname(abs); ; dir = dirname(dir)) {
    const mode = statSync(dir).mode;
    if ((mode & 0o001) === 0) return `${dir} is not searchable by other users (mode ${(mode & 0o777).toString(8)})`;
    if (dir === '/') return null;
  }
}
