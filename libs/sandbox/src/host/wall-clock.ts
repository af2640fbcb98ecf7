export type ClockEnd = 'timeout' | 'aborted';

/**
 * A run's wall clock and its caller's abort signal, started on entry to run() so that it covers
 * everything after: the host's preparation, the sandbox's own setup, the setup command.
 */
export class WallClock {
  readonly t0 = performance.now();
  private endedBy: ClockEnd | null = null;
  private readonly listeners: Array<(why: ClockEnd) => void> = [];
  private readonly timer: NodeJS.Timeout;
  private readonly onAbort = () => this.end('aborted');

  constructor(
    readonly wallMs: number,
    private readonly signal?: AbortSignal,
  ) {
    this.timer = setTimeout(() => this.end('timeout'), wallMs);
    if (signal?.aborted) this.end('aborted');
    else signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  get ended(): ClockEnd | null {
    return this.endedBy;
  }

  elapsed(): number {
    return performance.now() - this.t0;
  }

  /** Calls `fn` when the clock ends (at once if it already has). */
  onEnd(fn: (why: ClockEnd) => void): void {
    if (this.endedBy) fn(this.endedBy);
    else this.listeners.push(fn);
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.signal?.removeEventListener('abort', this.onAbort);
    this.listeners.length = 0;
  }

  private end(why: ClockEnd): void {
    if (this.endedBy) return;
    this.endedBy = why;
    clearTimeout(this.timer);
    for (const fn of this.listeners.splice(0)) fn(why);
  }
}
