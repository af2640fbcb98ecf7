import type { TrainerStepEvent } from '../runtime';

/** One trained (or skipped) batch as the trainer reported it, numbered in the order it happened. */
export interface LoggedStep {
  /** 1, 2, 3, ... in this process (a restarted trainer counts from 1 again). */
  seq: number;
  /** When the trainer finished the batch (ms since the epoch). */
  at: number;
  event: TrainerStepEvent;
}

/**
 * The trainer's recent steps (loss, gradient norm, mismatch, sharing, staleness, idle and busy
 * time) for whoever drives a run over HTTP: the distributed run's driver reads them to print the
 * progress line and write the same report as the embedded job, which gets them in process.
 * Bounded: past `capacity` the oldest steps are forgotten, and a reader that fell that far
 * behind is told how many it missed rather than handed a silent gap.
 */
export class StepLog {
  private readonly items: LoggedStep[] = [];
  private nextSeq = 1;

  constructor(private readonly capacity = 2_000) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`capacity must be a positive integer, got ${capacity}`);
  }

  push(event: TrainerStepEvent, at = Date.now()): void {
    this.items.push({ seq: this.nextSeq++, at, event });
    if (this.items.length > this.capacity) this.items.splice(0, this.items.length - this.capacity);
  }

  /** Steps with seq > after, oldest first, at most `limit`; `missed` counts those after `after` already forgotten. */
  since(after: number, limit = 500): { steps: LoggedStep[]; lastSeq: number; missed: number } {
    const first = this.items.length ? this.items[0].seq : this.nextSeq;
    const missed = Math.max(0, first - 1 - after);
    const steps = this.items.filter((s) => s.seq > after).slice(0, limit);
    return { steps, lastSeq: this.nextSeq - 1, missed };
  }
}
