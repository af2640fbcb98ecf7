import { closeSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { SandboxBreachError, SandboxUnavailableError } from '../errors';
import { isLive } from '../host/proc-scan';
import { UidSweeper } from '../host/uid-sweeper';

/**
 * Host uids for sandboxes, one per running sandbox: RLIMIT_NPROC is counted per uid, so a fork
 * bomb exhausts only its own sandbox's count, and no sandbox may signal or inspect another's
 * processes. The default range sits far above the ranges distributions hand out to users and
 * to container subuids (100000+, 65536 each), below 2^31 for tools that read uids as signed.
 *
 * A uid is held through a lock file naming the holder's pid, so several managers on one host
 * share the range; a lock whose holder died is taken over after killing whatever that uid still
 * runs.
 */
export const DEFAULT_UID_BASE = 1_800_000_000;
export const DEFAULT_UID_COUNT = 4096;

export interface UidLease {
  uid: number;
  /** Verifies that nothing of the uid still runs (killing what does), then frees it; returns the pids it had to kill. */
  release(): Promise<number[]>;
}

export class UidPool {
  private readonly held = new Set<number>();
  private cursor = 0;
  private readonly sweeper: UidSweeper;

  constructor(
    private readonly lockDir: string,
    private readonly base = DEFAULT_UID_BASE,
    private readonly count = DEFAULT_UID_COUNT,
  ) {
    if (!Number.isInteger(base) || !Number.isInteger(count) || base < 1000 || count < 1 || base + count > 2 ** 32 - 2)
      throw new SandboxUnavailableError(`sandbox uid range [${base}, ${base + count}) is not a valid range of unprivileged uids`);
    mkdirSync(lockDir, { recursive: true, mode: 0o700 });
    this.sweeper = new UidSweeper({ base, count });
  }

  async acquire(): Promise<UidLease> {
    for (let tried = 0; tried < this.count; tried++) {
      const uid = this.base + ((this.cursor + tried) % this.count);
      if (this.held.has(uid)) continue;
      const lock = join(this.lockDir, String(uid));
      if (!this.tryLock(lock)) {
        if (!this.staleLock(lock)) continue;
        // Its holder died: a sandbox of it might still be running (it was killed with its holder,
        // but be sure) before the uid is handed to someone else.
        if ((await this.sweeper.killUid(uid)).left.length) continue;
        unlinkQuiet(lock);
        if (!this.tryLock(lock)) continue;
      }
      this.cursor = (this.cursor + tried + 1) % this.count;
      this.held.add(uid);
      return { uid, release: () => this.release(uid, lock) };
    }
    throw new SandboxUnavailableError(
      `all ${this.count} sandbox uids from ${this.base} are in use: fewer sandboxes at once, or a larger uid range (uidCount)`,
    );
  }

  private async release(uid: number, lock: string): Promise<number[]> {
    const { found, left } = await this.sweeper.killUid(uid);
    this.held.delete(uid);
    // The uid stays locked: handing it out again would put a survivor into a new sandbox.
    if (left.length) throw new SandboxBreachError(`processes of sandbox uid ${uid} survive SIGKILL: ${left.join(', ')}`);
    unlinkQuiet(lock);
    return found;
  }

  private tryLock(lock: string): boolean {
    try {
      const fd = openSync(lock, 'wx', 0o600);
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw e;
    }
  }

  private staleLock(lock: string): boolean {
    let holder: number;
    try {
      holder = Number.parseInt(readFileSync(lock, 'utf8'), 10);
    } catch {
      return false;
    }
    // A lock being written has no pid yet; one of ours is live by definition.
    return Number.isInteger(holder) && holder > 0 && holder !== process.pid && !isLive(holder);
  }
}

function unlinkQuiet(p: string): void {
  try {
    unlinkSync(p);
  } catch {
    /* gone */
  }
}
