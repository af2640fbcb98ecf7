/**
 * Holds training between batches (e.g. while an evaluation runs pinned to the current version):
 * batches keep queueing behind the gate and are trained after resume(). pause() waits for the
 * batch being trained right now, not for the queue behind it.
 */
export class PauseGate {
  private gate: { promise: Promise<void>; release: () => void } | null = null;
  /** The batch being trained right now. */
  private training: Promise<void> | null = null;

  /** Closes the gate (if open) and resolves once no batch is being trained. */
  async pause(): Promise<void> {
    if (!this.gate) {
      let release!: () => void;
      const promise = new Promise<void>((r) => (release = r));
      this.gate = { promise, release };
    }
    while (this.training) await this.training.catch(() => undefined);
  }

  resume(): void {
    const gate = this.gate;
    this.gate = null;
    gate?.release();
  }

  /** Waits while the gate is closed, unless the trainer is stopping. */
  async passed(stopping: () => boolean): Promise<void> {
    while (this.gate && !stopping()) await this.gate.promise;
  }

  /** Runs one batch's training as the one pause() waits for. */
  async track(run: Promise<void>): Promise<void> {
    this.training = run;
    try {
      await run;
    } finally {
      if (this.training === run) this.training = null;
    }
  }
}
