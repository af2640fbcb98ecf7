import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Workspaces of agents and verifier commands are named for the manager that made them: `anvil-<kind>-<pid>-XXXXXX`. */
const PREFIX = /^anvil-(agent|verifier)-(\d+)-/;

/** A fresh workspace under the temp directory (which every sandbox uid may pass through), named for this process. */
export function newWorkspace(kind: 'agent' | 'verifier'): Promise<string> {
  return mkdtemp(join(tmpdir(), `anvil-${kind}-${process.pid}-`));
}

function live(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^[ZX]$/.test(stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3));
  } catch {
    return false;
  }
}

/**
 * Removes the workspaces a manager that died mid-run left behind (its agents died with it; what
 * they wrote, a checkout perhaps, would stay forever). A pid that is live again is left alone.
 */
export async function removeDeadManagersWorkspaces(): Promise<number> {
  const dead = readdirSync(tmpdir()).filter((name) => {
    const pid = Number(PREFIX.exec(name)?.[2]);
    return pid > 0 && pid !== process.pid && !live(pid);
  });
  await Promise.all(dead.map((name) => rm(join(tmpdir(), name), { recursive: true, force: true }).catch(() => undefined)));
  return dead.length;
}
