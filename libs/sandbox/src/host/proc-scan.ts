import { readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** Host uids [base, base + count) whose processes one sweep of /proc reports. */
export interface UidRange {
  base: number;
  count: number;
}

/**
 * Live (not zombie) processes of every uid in `range`, by real uid, from one pass over /proc.
 *
 * Why the owner of /proc/<pid> is read first: a stat costs a third of reading the status file
 * (which the kernel formats on every open), and it rules out every other process on the host.
 * That directory always belongs to the process's effective uid (the files inside turn root's
 * when it is not dumpable, the directory never does), and a sandboxed process cannot make its
 * effective uid differ from its real one: its user namespace maps no other uid and no_new_privs
 * disarms setuid binaries. The status file then confirms the real uid and that it is not a zombie.
 */
export function processesOfUids(range: UidRange): Map<number, number[]> {
  const end = range.base + range.count;
  const out = new Map<number, number[]>();
  for (const e of readdirSync('/proc')) {
    if (e.charCodeAt(0) < 48 || e.charCodeAt(0) > 57) continue;
    let status: string;
    try {
      const owner = statSync(`/proc/${e}`).uid;
      if (owner < range.base || owner >= end) continue;
      status = readFileSync(`/proc/${e}/status`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    const real = /\nUid:\t(\d+)/.exec(status);
    const state = /\nState:\t(\S)/.exec(status);
    if (!real || !state || state[1] === 'Z' || state[1] === 'X') continue;
    const uid = Number(real[1]);
    if (uid < range.base || uid >= end) continue;
    const pids = out.get(uid);
    if (pids) pids.push(Number(e));
    else out.set(uid, [Number(e)]);
  }
  return out;
}

/** Whether `pid` is a live (not zombie) process. */
export function isLive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat[stat.lastIndexOf(')') + 2];
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Removes `<prefix><pid>-*` directories under `base` whose host process died mid-run (its sandboxes died with it). */
export function removeDeadHostsDirs(base: string, prefix: string): void {
  for (const name of readdirSync(base)) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number(/^(\d+)-/.exec(name.slice(prefix.length))?.[1]);
    if (pid && pid !== process.pid && !isLive(pid)) rmSync(join(base, name), { recursive: true, force: true });
  }
}
