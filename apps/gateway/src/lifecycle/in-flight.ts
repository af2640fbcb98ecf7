/**
 * Calls in progress, so shutdown can finish them (and publish their records) before the bus
 * and the database close. Once draining, new calls are refused with 503.
 */
export class InFlightCalls {
  private count = 0;
  private draining = false;
  private waiters: (() => void)[] = [];

  get size(): number {
    return this.count;
  }

  get isDraining(): boolean {
    return this.draining;
  }

  /** Registers a call; returns its release function, or null when draining. */
  enter(): (() => void) | null {
    if (this.draining) return null;
    this.count++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.count--;
      if (this.count === 0) for (const w of this.waiters.splice(0)) w();
    };
  }

  /** From now on new calls are refused (503); the running ones go on. */
  stopAccepting(): void {
    this.draining = true;
  }

  /** Refuses new calls and resolves when the running ones are done (or after timeoutMs). */
  async drain(timeoutMs: number): Promise<boolean> {
    this.draining = true;
    if (this.count === 0) return true;
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }
}
