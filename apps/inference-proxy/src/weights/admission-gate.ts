/**
 * Holds new generation attempts while weights are swapped. Closed, it makes callers WAIT (a
 * weight swap is a pause, not an outage); a caller that gives up (its signal aborts) stops
 * waiting. Opening releases everyone at once.
 */
export class AdmissionGate {
  private closedFor: string | null = null;
  private waiters = new Set<() => void>();

  get isOpen(): boolean {
    return this.closedFor === null;
  }

  get reason(): string | null {
    return this.closedFor;
  }

  close(reason: string): void {
    this.closedFor = reason;
  }

  open(): void {
    this.closedFor = null;
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const w of waiters) w();
  }

  /** Resolves once the gate is open (at once if it is); rejects with the signal's reason if that fires first. */
  wait(signal?: AbortSignal): Promise<void> {
    if (this.isOpen) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const done = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      const onAbort = () => {
        this.waiters.delete(done);
        reject(signal?.reason ?? new Error('aborted'));
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.add(done);
    });
  }

  get waiting(): number {
    return this.waiters.size;
  }
}
