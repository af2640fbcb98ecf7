import { lchown, lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';

export interface Owner {
  uid: number;
  gid: number;
}

/**
 * Gives a whole tree to `owner`, symlinks themselves included and never followed: a program may
 * leave a link to any host path in its workspace, and following it would hand that path over.
 */
export async function chownTree(root: string, owner: Owner): Promise<void> {
  const stack = [root];
  for (let dir = stack.pop(); dir !== undefined; dir = stack.pop()) {
    await lchown(dir, owner.uid, owner.gid);
    for (const e of await readdir(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) stack.push(p);
      else await lchown(p, owner.uid, owner.gid);
    }
  }
}

export async function ownerOf(path: string): Promise<Owner> {
  const s = await lstat(path);
  return { uid: s.uid, gid: s.gid };
}
