import { lchownSync, lstatSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

export interface Owner {
  uid: number;
  gid: number;
}

/** Entries changed between two yields to the event loop: a large checkout never blocks the host for long. */
const ENTRIES_PER_TURN = 256;

/**
 * Gives a whole tree to `owner`, symlinks themselves included and never followed: a program may
 * leave a link to any host path in its workspace, and following it would hand that path over.
 *
 * Synchronous calls in batches, not one awaited call per file: each awaited call is a trip
 * through libuv's thread pool and back through the event loop, and on a busy host those trips,
 * one per file, were most of the time a sandbox took to start.
 */
export async function chownTree(root: string, owner: Owner): Promise<void> {
  const stack = [root];
  let done = 0;
  for (let dir = stack.pop(); dir !== undefined; dir = stack.pop()) {
    lchownSync(dir, owner.uid, owner.gid);
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) stack.push(p);
      else lchownSync(p, owner.uid, owner.gid);
      if (++done % ENTRIES_PER_TURN === 0) await new Promise<void>((r) => setImmediate(r));
    }
  }
}

export function ownerOf(path: string): Owner {
  const s = lstatSync(path);
  return { uid: s.uid, gid: s.gid };
}
