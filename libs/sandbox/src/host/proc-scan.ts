import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';

/** Live (not zombie) processes whose real uid is `uid`, from /proc. */
export function processesOfUid(uid: number): number[] {
  const out: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (e.charCodeAt(0) < 48 || e.charCodeAt(0) > 57) continue;
    let status: string;
    try {
      status = readFileSync(`/proc/${e}/status`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    const real = /\nUid:\t(\d+)/.exec(status);
    const state = /\nState:\t(\S)/.exec(status);
    if (real && Number(real[1]) === uid && state && state[1] !== 'Z' && state[1] !== 'X') out.push(Number(e));
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

/** SIGKILLs every process of `uid` until none is left (or `timeoutMs` passes): those it found, and those still there. */
export async function killUid(uid: number, timeoutMs = 5000): Promise<{ found: number[]; left: number[] }> {
  const deadline = Date.now() + timeoutMs;
  const found = new Set<number>();
  for (;;) {
    const left = processesOfUid(uid);
    if (left.length === 0 || Date.now() > deadline) return { found: [...found], left };
    for (const pid of left) {
      found.add(pid);
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    await sleep(10);
  }
}

/** Removes `<prefix><pid>-*` directories under `base` whose host process died mid-run (its sandboxes died with it). */
export function removeDeadHostsDirs(base: string, prefix: string): void {
  for (const name of readdirSync(base)) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number(/^(\d+)-/.exec(name.slice(prefix.length))?.[1]);
    if (pid && pid !== process.pid && !isLive(pid)) rmSync(join(base, name), { recursive: true, force: true });
  }
}
