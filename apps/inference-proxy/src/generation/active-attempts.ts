/** One generation attempt running on a replica right now. */
export interface ActiveAttempt {
  readonly replicaId: string;
  /** Stops the attempt at the next token boundary so it can resume under new weights. */
  interruptForSwap(): void;
}

/**
 * The attempts running on replicas. A weight swap waits for this to empty (drain) or
 * interrupts them all first (abort-and-resume): either way no token sampled from the old
 * weights arrives after the new ones start loading.
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
    for (const a of this.attempts) a.interruptForSwap();
    return this.attempts.size;
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
