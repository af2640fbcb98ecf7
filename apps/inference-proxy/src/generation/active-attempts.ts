import type { WeightSwapChoice } from '@anvil/contracts';

/** One generation attempt running on a replica right now. */
export interface ActiveAttempt {
  readonly replicaId: string;
  /** Its request's choice of what a weight swap does to it (absent: the deployment's policy). */
  readonly weightSwap?: WeightSwapChoice;
  /** Stops the attempt at the next token boundary so it can resume under new weights. */
  interruptForSwap(): void;
}

/**
 * The attempts running on replicas. A weight swap interrupts those that abort and resume, then
 * waits for this to empty (the others finish on the old weights): either way no token sampled
 * from the old weights arrives after the new ones start loading.
 */
export class ActiveAttempts {
  private readonly attempts = new Set<ActiveAttempt>();
  private idleWaiters: (() => void)[] = [];

  get count(): number {
    return this.attempts.size;
  }

  add(a: ActiveAttempt): void {
    this.attempts.add(a);
  }

  remove(a: ActiveAttempt): void {
    if (!this.attempts.delete(a) || this.attempts.size > 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }

  interruptAll(): number {
    return this.interrupt(() => true);
  }

  /** Interrupts the attempts `which` picks; returns how many. */
  interrupt(which: (a: ActiveAttempt) => boolean): number {
    let n = 0;
    for (const a of this.attempts) {
      if (!which(a)) continue;
      a.interruptForSwap();
      n++;
    }
    return n;
  }

  /** Resolves when no attempt runs; false if timeoutMs passed first. */
  whenIdle(timeoutMs = Number.POSITIVE_INFINITY): Promise<boolean> {
    if (this.attempts.size === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const done = () => {
        clearTimeout(timer);
        resolve(true);
      };
      this.idleWaiters.push(done);
      if (Number.isFinite(timeoutMs)) {
        timer = setTimeout(() => {
          this.idleWaiters = this.idleWaiters.filter((w) => w !== done);
          resolve(false);
        }, timeoutMs);
      }
    });
  }
}
