/**
 * The stop switch of one generation: the client leaving, the proxy shutting down or the
 * request deadline flip it, and flipping it aborts the attempt running at that moment.
 *
 * Why not AbortSignals linked with linkAbort/AbortSignal.any: those build an AbortController
 * plus an event listener per source, at the HTTP layer, the request level and the attempt
 * level. Here the sources call abort() directly and only the attempt (which the backend needs
 * as a real AbortSignal) gets a controller; a signal for the request as a whole is made only
 * when something waits on it (a closed admission gate, which is rare).
 */
export class RequestStop {
  private stopped = false;
  private attempt: AbortController | null = null;
  private waitController: AbortController | null = null;
  private timer: NodeJS.Timeout | undefined;

  /** Aborts after timeoutMs (when > 0) unless dispose() runs first. */
  arm(timeoutMs: number): void {
    if (this.stopped || !(timeoutMs > 0)) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => this.abort(), timeoutMs);
    this.timer.unref();
  }

  get aborted(): boolean {
    return this.stopped;
  }

  /** Stops the request: the running attempt and any wait on `signal` abort at once. Idempotent. */
  abort(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.dispose();
    this.attempt?.abort();
    this.waitController?.abort();
  }

  /** An AbortSignal for the whole request, for waits outside an attempt. */
  get signal(): AbortSignal {
    if (!this.waitController) {
      this.waitController = new AbortController();
      if (this.stopped) this.waitController.abort();
    }
    return this.waitController.signal;
  }

  /** The controller of a new attempt: aborted when the request stops (at once if it already has). */
  beginAttempt(): AbortController {
    const controller = new AbortController();
    if (this.stopped) controller.abort();
    this.attempt = controller;
    return controller;
  }

  endAttempt(controller: AbortController): void {
    if (this.attempt === controller) this.attempt = null;
  }

  /** Clears the deadline; the switch stays usable (abort() still works). */
  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
