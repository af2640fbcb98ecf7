import type { RolloutMetrics } from '../metrics';

/** What holds a train group at the head of the queue: the staleness controller's two bounds, or all N slots running. */
export type AdmissionBlock = 'capacity' | 'version' | 'slots';

/**
 * How long the head of the train queue has waited, by what held it: why rollouts are not
 * starting, which refusal counts cannot say (a refusal is counted per attempt).
 */
export class AdmissionWait {
  /** What holds the head since when (null: nothing waits, or an evaluation gates admissions). */
  private current: { reason: AdmissionBlock; since: number } | null = null;
  private readonly totalMs: Record<AdmissionBlock, number> = { capacity: 0, version: 0, slots: 0 };

  constructor(private readonly metrics: RolloutMetrics) {}

  /** Ends the open wait (its time to its reason) and opens one for `reason` unless null or unchanged. */
  mark(reason: AdmissionBlock | null): void {
    if (this.current?.reason === reason) return;
    const now = Date.now();
    if (this.current) {
      const ms = now - this.current.since;
      this.totalMs[this.current.reason] += ms;
      this.metrics.admissionBlockedSeconds.inc({ reason: this.current.reason }, ms / 1000);
    }
    this.current = reason === null ? null : { reason, since: now };
  }

  /** Seconds waited so far by reason, the open wait included. */
  seconds(now = Date.now()): Record<AdmissionBlock, number> {
    const out = { ...this.totalMs };
    if (this.current) out[this.current.reason] += now - this.current.since;
    return { capacity: out.capacity / 1000, version: out.version / 1000, slots: out.slots / 1000 };
  }
}
