import type { EventEnvelope } from '@anvil/contracts';
import type { MessageBus } from '../bus';

/** A row the sweeper found: its event id, and how to turn it back into the event (may throw: unreadable). */
export interface OutboxRow {
  id: string;
  event(): EventEnvelope | Promise<EventEnvelope>;
}

/**
 * Where an outbox keeps its rows (a table written in the same transaction as the state change).
 * The relay never writes rows; it publishes them and asks for their deletion.
 */
export interface OutboxStorage {
  /** Rows at least `staleAfterMs` old, in commit order (oldest first), at most `limit`. */
  staleRows(staleAfterMs: number, limit: number): Promise<OutboxRow[]>;
  /** Deletes the rows of published events. */
  deleteRows(ids: readonly string[]): Promise<void>;
  /** false while the table may not exist yet (schema not migrated): the sweeper waits. */
  isReady?(): boolean;
}

export interface OutboxRelayOptions {
  /** Events per publish (one acks=all produce request). Default 256. */
  maxBatch?: number;
  /** Backoff between attempts while the broker refuses a batch: doubles from min to max. Defaults 100 ms, 5 s. */
  retryMinMs?: number;
  retryMaxMs?: number;
  /** Published ids wait this long for a caller to delete their rows with its own write (`takePublished`); then they are deleted on their own. Default 50 ms. */
  deleteDelayMs?: number;
  /** How often the sweeper looks for rows nobody is publishing. Default 5 s. */
  sweepIntervalMs?: number;
  /** A row this old is nobody's in-memory work any more (its process died, or it was restarted). Default 10 s. */
  staleAfterMs?: number;
  onPublished?: (count: number, via: 'direct' | 'sweep') => void;
  onBacklog?: (events: number) => void;
  warn?: (msg: string, fields: Record<string, unknown>) => void;
}

/**
 * The relay half of a transactional outbox (the rows are written by the caller, in the same
 * transaction as the state change they announce):
 *  - `enqueue(events)` right after the commit: published in that order, one batch at a time,
 *    so a key's events reach the bus in commit order;
 *  - a batch the broker refuses is retried with backoff until it goes through: the rows are
 *    durable, so an outage delays events and loses none (later events wait behind it);
 *  - published ids are deleted `deleteDelayMs` later in one statement, unless a caller takes
 *    them first (`takePublished`) to delete them with its own next write;
 *  - the sweeper publishes rows nobody is publishing (`staleAfterMs` old: a process that died
 *    between commit and publish, or events committed by a caller that never enqueued them): at
 *    `start()` and every `sweepIntervalMs`.
 * An event can thus be published twice (a delete lost in a crash, two sweepers): consumers are
 * idempotent by event id, so that duplicates nothing downstream.
 */
export class OutboxRelay {
  private queue: EventEnvelope[] = [];
  private publishing = false;
  private published: string[] = [];
  private deleteTimer: NodeJS.Timeout | null = null;
  private sweepTimer: NodeJS.Timeout | null = null;
  private sweeping: Promise<number> | null = null;
  private stopped = false;
  private wakeRetry: (() => void) | null = null;
  private idle: (() => void)[] = [];
  private failures = 0;

  constructor(
    private readonly storage: OutboxStorage,
    private readonly bus: Pick<MessageBus, 'publish'>,
    private readonly opts: OutboxRelayOptions = {},
  ) {}

  /** Events not yet acknowledged by the broker. */
  get backlog(): number {
    return this.queue.length;
  }

  /** Events whose outbox rows were just committed (in commit order). */
  enqueue(events: readonly EventEnvelope[]): void {
    if (events.length === 0) return;
    this.queue.push(...events);
    this.opts.onBacklog?.(this.queue.length);
    void this.pump();
  }

  /** Ids published since the last call, for the caller's statement to delete with its own write. */
  takePublished(): string[] {
    const ids = this.published;
    this.published = [];
    if (this.deleteTimer) clearTimeout(this.deleteTimer);
    this.deleteTimer = null;
    return ids;
  }

  /** Gives back ids a statement did not get to delete (it failed). */
  returnPublished(ids: readonly string[]): void {
    if (ids.length === 0) return;
    this.published.push(...ids);
    this.scheduleDelete();
  }

  /** Starts the sweeper (first sweep at once). */
  start(): void {
    if (this.sweepTimer || this.stopped) return;
    const tick = () => {
      void this.sweep()
        .catch((err: unknown) => this.opts.warn?.('outbox sweep failed; retrying at the next sweep', { err }))
        .finally(() => {
          if (!this.stopped) this.sweepTimer = setTimeout(tick, this.opts.sweepIntervalMs ?? 5_000).unref();
        });
    };
    this.sweepTimer = setTimeout(tick, 0).unref();
  }

  /**
   * Graceful shutdown: publishes what is queued within `timeoutMs` and deletes the published
   * rows, then stops. What the broker did not take stays in the outbox for the next sweeper.
   * Resolves true when nothing was left.
   */
  async drain(timeoutMs: number): Promise<boolean> {
    const done =
      this.queue.length === 0 && !this.publishing ? Promise.resolve(true) : new Promise<boolean>((r) => this.idle.push(() => r(true)));
    let timer: NodeJS.Timeout | undefined;
    const drained = await Promise.race([done, new Promise<boolean>((r) => (timer = setTimeout(() => r(false), timeoutMs)))]);
    clearTimeout(timer);
    this.stopped = true;
    this.wakeRetry?.();
    if (this.sweepTimer) clearTimeout(this.sweepTimer);
    await this.sweeping?.catch(() => undefined);
    await this.deletePublished().catch((err: unknown) =>
      this.opts.warn?.('could not delete published outbox rows at shutdown (the sweeper republishes them; consumers dedupe)', { err }),
    );
    return drained && this.queue.length === 0;
  }

  private async pump(): Promise<void> {
    if (this.publishing) return;
    this.publishing = true;
    let delayMs = this.opts.retryMinMs ?? 100;
    while (this.queue.length > 0 && !this.stopped) {
      const batch = this.queue.slice(0, this.opts.maxBatch ?? 256);
      try {
        await this.bus.publish(batch);
      } catch (err) {
        // Not lost: the rows are durable. Wait and retry the same batch (later ones keep their order behind it).
        if (this.failures++ % 50 === 0)
          this.opts.warn?.('publishing outbox events failed; they stay in the outbox and are retried', {
            events: batch.length,
            backlog: this.queue.length,
            err,
          });
        await new Promise<void>((r) => {
          const t = setTimeout(r, delayMs);
          this.wakeRetry = () => (clearTimeout(t), r());
        });
        this.wakeRetry = null;
        delayMs = Math.min(delayMs * 2, this.opts.retryMaxMs ?? 5_000);
        continue;
      }
      this.failures = 0;
      delayMs = this.opts.retryMinMs ?? 100;
      this.queue.splice(0, batch.length);
      for (const e of batch) this.published.push(e.id);
      this.scheduleDelete();
      this.opts.onPublished?.(batch.length, 'direct');
      this.opts.onBacklog?.(this.queue.length);
    }
    this.publishing = false;
    if (this.queue.length === 0) for (const r of this.idle.splice(0)) r();
  }

  private scheduleDelete(): void {
    if (this.deleteTimer || this.published.length === 0) return;
    this.deleteTimer = setTimeout(() => {
      this.deleteTimer = null;
      void this.deletePublished().catch((err: unknown) =>
        this.opts.warn?.('could not delete published outbox rows (the sweeper republishes them; consumers dedupe)', { err }),
      );
    }, this.opts.deleteDelayMs ?? 50);
    this.deleteTimer.unref();
  }

  private async deletePublished(): Promise<void> {
    const ids = this.takePublished();
    if (ids.length) await this.storage.deleteRows(ids);
  }

  /** Publishes and deletes stale rows, a batch at a time; returns how many were published. */
  sweep(): Promise<number> {
    if (this.sweeping) return this.sweeping;
    this.sweeping = this.sweepOnce().finally(() => (this.sweeping = null));
    return this.sweeping;
  }

  private async sweepOnce(): Promise<number> {
    if (this.storage.isReady && !this.storage.isReady()) return 0;
    const limit = this.opts.maxBatch ?? 256;
    const staleAfterMs = this.opts.staleAfterMs ?? 10_000;
    let total = 0;
    const skip = new Set<string>();
    for (;;) {
      if (this.stopped) return total;
      const rows = await this.storage.staleRows(staleAfterMs, limit + skip.size);
      // Rows this instance is still publishing (a long broker outage) or deleting are left to it.
      const mine = new Set([...this.queue.map((e) => e.id), ...this.published]);
      const events: EventEnvelope[] = [];
      for (const r of rows) {
        if (mine.has(r.id) || skip.has(r.id)) continue;
        try {
          events.push(await r.event());
        } catch (err) {
          // Unreadable by this version (e.g. a contract version it no longer supports): kept
          // for an operator, not retried by this sweep.
          skip.add(r.id);
          this.opts.warn?.('outbox row cannot be decoded; left in place', { eventId: r.id, err });
        }
      }
      if (events.length === 0) return total;
      await this.bus.publish(events);
      await this.storage.deleteRows(events.map((e) => e.id));
      total += events.length;
      this.opts.onPublished?.(events.length, 'sweep');
      if (rows.length < limit + skip.size) return total;
    }
  }
}
