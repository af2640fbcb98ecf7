import { processesOfUids, sleep, type UidRange } from './proc-scan';

/** Sweeps of /proc are at least this far apart; the releases that arrive meanwhile share the next one. */
export const MIN_SWEEP_INTERVAL_MS = 10;

interface Waiter {
  uid: number;
  resolve(pids: number[]): void;
  reject(e: unknown): void;
}

/**
 * Answers "what does uid X still run" for every sandbox uid of a pool from shared passes over
 * /proc. A pass costs milliseconds of the host's thread and grows with the processes on the
 * machine; with one pass per released sandbox, a host running hundreds of sandboxes spent a
 * tenth of its throughput proving they were gone. Now the releases of one interval share a
 * pass, and a quiet host still sweeps at once (no pass in the last interval: no wait).
 */
export class UidSweeper {
  private waiting: Waiter[] = [];
  private scheduled = false;
  private lastSweep = -Infinity;
  /** Passes over /proc so far (tests and benches read it). */
  sweeps = 0;

  constructor(
    private readonly range: UidRange,
    private readonly scan: (range: UidRange) => Map<number, number[]> = processesOfUids,
    private readonly minIntervalMs = MIN_SWEEP_INTERVAL_MS,
  ) {}

  /** Live processes of `uid` as of a pass that began after this call. */
  processesOf(uid: number): Promise<number[]> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ uid, resolve, reject });
      if (this.scheduled) return;
      this.scheduled = true;
      const wait = this.lastSweep + this.minIntervalMs - performance.now();
      if (wait > 0) setTimeout(() => this.sweep(), wait);
      else setImmediate(() => this.sweep());
    });
  }

  /** SIGKILLs every process of `uid` until none is left (or `timeoutMs` passes): those it found, and those still there. */
  async killUid(uid: number, timeoutMs = 5000): Promise<{ found: number[]; left: number[] }> {
    const deadline = Date.now() + timeoutMs;
    const found = new Set<number>();
    for (;;) {
      const left = await this.processesOf(uid);
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

  private sweep(): void {
    const waiting = this.waiting;
    this.waiting = [];
    this.scheduled = false;
    this.lastSweep = performance.now();
    this.sweeps++;
    let found: Map<number, number[]>;
    try {
      found = this.scan(this.range);
    } catch (e) {
      for (const w of waiting) w.reject(e);
      return;
    }
    for (const w of waiting) w.resolve(found.get(w.uid) ?? []);
  }
}
