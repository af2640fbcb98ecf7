import type { Logger } from '@anvil/observability';
import type { RolloutMetrics } from '../metrics';
import type { RolloutRow } from '../state-store';
import type { ExecutedRollout, RolloutExecutor, RolloutOutcome } from './executor';
import type { GroupState } from './group-state';

export interface SlotDeps {
  executor: Pick<RolloutExecutor, 'run'>;
  metrics: RolloutMetrics;
  logger: Logger;
  /** Group bookkeeping as a member's outcome is out: true when that finished the group. */
  rolloutDone(g: GroupState, r: RolloutRow): boolean;
  /** A finished group's state write, made once its last member's cleanup is done. */
  writeFinished(g: GroupState): Promise<void>;
  /** A slot is free (admit more). */
  freed(): void;
  /** A rollout's cleanup is over (the runtime may be idle now). */
  settled(): void;
}

interface Running {
  abort: AbortController;
  done: Promise<void>;
}

/**
 * The N slots rollouts run in: each launched rollout holds one until its outcome is out
 * (rollout.completed durable); its cleanup (session close, state writes) runs after, off the slot,
 * and listeners hear of the rollout once it is done.
 */
export class RolloutSlots {
  private readonly running = new Map<string, Running>();
  /** Rollouts whose outcome is out and whose cleanup (session close, state writes, listeners) still runs. */
  private readonly finishing = new Set<Promise<void>>();
  private readonly listeners: ((o: RolloutOutcome) => void)[] = [];

  constructor(private readonly d: SlotDeps) {}

  /** Rollouts holding a slot. */
  get size(): number {
    return this.running.size;
  }

  /** Whether a rollout still runs or cleans up. */
  get busy(): boolean {
    return this.running.size > 0 || this.finishing.size > 0;
  }

  onCompleted(fn: (o: RolloutOutcome) => void): void {
    this.listeners.push(fn);
  }

  launch(g: GroupState, r: RolloutRow): void {
    const abort = new AbortController();
    r.status = 'running';
    const done = this.d.executor
      .run(g, r, abort.signal)
      .then(
        ({ outcome, cleanup }) => this.finished(g, r, outcome, cleanup),
        (err: unknown) => this.d.logger.error('rollout bookkeeping failed', { rolloutId: r.id, err }),
      )
      .finally(() => {
        this.running.delete(r.id);
        this.d.metrics.inFlight.set(this.running.size);
        this.d.freed();
      });
    this.running.set(r.id, { abort, done });
    this.d.metrics.inFlight.set(this.running.size);
  }

  /** Running rollouts get `graceMs`, then are aborted; resolves once every one is out and cleaned up. */
  async stop(graceMs: number): Promise<void> {
    const all = [...this.running.values()];
    if (graceMs > 0) await Promise.race([Promise.all(all.map((r) => r.done)), new Promise((r) => setTimeout(r, graceMs))]);
    for (const r of this.running.values()) r.abort.abort('aborted');
    await Promise.all([...this.running.values()].map((r) => r.done));
    await Promise.all([...this.finishing]);
  }

  /**
   * A rollout's outcome is out (rollout.completed durable): its slot and its group's staleness
   * capacity are released now; its session close and state writes finish in the background, and
   * listeners hear of it once they have (its session is then closed).
   */
  private finished(g: GroupState, r: RolloutRow, outcome: ExecutedRollout['outcome'], cleanup: Promise<number>): void {
    this.d.metrics.completed.inc({ finish_reason: outcome.finishReason, purpose: g.row.purpose });
    const groupDone = this.d.rolloutDone(g, r);
    const after = cleanup
      .then(async (cleanupMs) => {
        if (groupDone) await this.d.writeFinished(g);
        const full: RolloutOutcome = { ...outcome, cleanupMs };
        for (const l of [...this.listeners]) {
          try {
            l(full);
          } catch (err) {
            this.d.logger.warn('rollout listener threw', { err });
          }
        }
      })
      .catch((err: unknown) => this.d.logger.error('rollout cleanup failed', { rolloutId: r.id, err }))
      .finally(() => {
        this.finishing.delete(after);
        this.d.settled();
      });
    this.finishing.add(after);
  }
}
