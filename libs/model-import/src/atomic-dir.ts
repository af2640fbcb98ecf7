// A directory that appears whole or not at all: its files are written into a temporary directory
// beside the target (same file system, so rename is atomic), which is renamed onto the target
// only once everything is written; on any error the temporary directory is removed and the target
// is as it was.
import { promises as fsp } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';

export class TargetExistsError extends Error {
  override name = 'TargetExistsError';
}

async function stateOf(path: string): Promise<'absent' | 'empty' | 'full' | 'not-a-directory'> {
  const st = await fsp.stat(path).catch((e: NodeJS.ErrnoException) => {
    if (e.code === 'ENOENT') return null;
    throw e;
  });
  if (st === null) return 'absent';
  if (!st.isDirectory()) return 'not-a-directory';
  return (await fsp.readdir(path)).length === 0 ? 'empty' : 'full';
}

/** Refuses a target that is a file, or a non-empty directory unless overwrite is set. */
export async function checkTarget(target: string, overwrite: boolean): Promise<void> {
  const state = await stateOf(target);
  if (state === 'not-a-directory') throw new TargetExistsError(`${target} exists and is not a directory`);
  if (state === 'full' && !overwrite) throw new TargetExistsError(`${target} is not empty (pass overwrite / --force to replace it)`);
}

/**
 * Runs fill(tmpDir) and moves what it wrote to target. With overwrite, a non-empty target is
 * replaced: moved aside, then removed once the new directory is in place (and put back if the
 * final rename fails).
 */
export async function writeDirAtomically<T>(target: string, overwrite: boolean, fill: (dir: string) => Promise<T>): Promise<T> {
  const dest = resolve(target);
  await checkTarget(dest, overwrite);
  const parent = dirname(dest);
  await fsp.mkdir(parent, { recursive: true });
  const tmp = await fsp.mkdtemp(join(parent, `.${basename(dest)}.partial-`));
  await fsp.chmod(tmp, 0o755); // mkdtemp makes it private; the model directory is not
  let result: T;
  try {
    result = await fill(tmp);
  } catch (e) {
    await fsp.rm(tmp, { recursive: true, force: true });
    throw e;
  }
  let aside: string | null = null;
  try {
    await checkTarget(dest, overwrite); // again: someone may have written there meanwhile
    const state = await stateOf(dest);
    if (state === 'empty') await fsp.rmdir(dest);
    else if (state === 'full') {
      aside = `${tmp}.replaced`;
      await fsp.rename(dest, aside);
    }
    await fsp.rename(tmp, dest);
  } catch (e) {
    if (aside !== null) await fsp.rename(aside, dest).catch(() => undefined);
    await fsp.rm(tmp, { recursive: true, force: true });
    throw e;
  }
  if (aside !== null) await fsp.rm(aside, { recursive: true, force: true });
  return result;
}
