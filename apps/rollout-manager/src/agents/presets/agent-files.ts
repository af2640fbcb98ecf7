/**
 * Reading what an agent left in its workspace. The workspace was the agent's: any component of
 * a path in it may be a symlink to a host file the manager can read, or a FIFO. So every
 * directory on the way is checked to be a directory (lstat, never followed) and the file is
 * opened O_NOFOLLOW | O_NONBLOCK and read only when it is a regular file, at most `cap` bytes.
 * (The agent is gone when this runs: nothing changes the tree meanwhile.)
 */
import { constants } from 'node:fs';
import { lstat, open, readdir } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';

async function plainDirs(base: string, path: string): Promise<boolean> {
  const rel = relative(base, path);
  if (rel.startsWith('..') || rel === '') return rel === '';
  let at = base;
  for (const part of rel.split(sep)) {
    at = join(at, part);
    try {
      if (!(await lstat(at)).isDirectory()) return false;
    } catch {
      return false;
    }
  }
  return true;
}

/** The text of `base/rel` (a regular file reached through plain directories), its first `cap` bytes, or null. */
export async function readAgentFile(base: string, rel: string, cap: number): Promise<string | null> {
  const path = join(base, rel);
  if (!(await plainDirs(base, join(path, '..')))) return null;
  let file;
  try {
    file = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const st = await file.stat();
    if (!st.isFile()) return null;
    const buf = Buffer.alloc(Math.min(cap, st.size));
    const { bytesRead } = await file.read(buf, 0, buf.length, 0);
    return buf.subarray(0, bytesRead).toString('utf8');
  } finally {
    await file.close();
  }
}

/** Regular files under `base/rel` (relative to base), plain directories only, depth-first in name order, at most `max`. */
export async function listAgentFiles(base: string, rel: string, max = 1000): Promise<string[]> {
  const out: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    let entries;
    try {
      entries = await readdir(join(base, dir), { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      if (out.length >= max) return;
      if (e.isDirectory()) await walk(join(dir, e.name));
      else if (e.isFile()) out.push(join(dir, e.name));
    }
  };
  if (await plainDirs(base, join(base, rel))) await walk(rel);
  return out;
}
