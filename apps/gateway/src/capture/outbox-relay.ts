import { decodeEvent, type EventEnvelope } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import type { SqlClient } from '../db/sql-client';

export interface OutboxRelayOptions {
  /** Events per publish (one acks=all produce request). */
  maxBatch?: number;
  /** Backoff between attempts while the broker refuses a batch: doubles from min to max. */
  retryMinMs?: number;
  retryMaxMs?: number;
  /** Published ids wait this long for a commit statement to delete their rows; then they are deleted on their own. */
  deleteDelayMs?: number;
  /** How often the sweeper looks for rows nobody is publishing. */
  sweepIntervalMs?: number;
  /** A row this old is nobody's in-memory work any more (its gateway died, or it was restarted). */
  staleAfterMs?: number;
  /** The prompt ids of a call from its capture row (rows stored with prompt_from_capture); null when it cannot be rebuilt. */
  promptOf?: (callId: string) => Promise<readonly number[] | null>;
  /** false while the schema is not migrated yet (the sweeper waits). */
  isReady?: () => boolean;
  onPublished?: (count: number, via: 'direct' | 'sweep') => void;
  onBacklog?: (events: number) => void;
  warn?: (msg: string, fields: Record<string, unknown>) => void;
}

interface OutboxRow {
  event_id: string;
  turn_index: number;
  frame: Buffer;
  prompt_from_capture: boolean;
  reused_prompt_tokens: number;
}

const STALE_SQL = `SELECT "event_id", "turn_index", "frame", "prompt_from_capture", "reused_prompt_tokens" FROM "gateway_outbox"
  WHERE "created_at" < now() - make_interval(secs => $1::float8)
  ORDER BY "created_at", "session_id", "turn_index" LIMIT $2`;

export const OUTBOX_DELETE_SQL = `DELETE FROM "gateway_outbox" WHERE "event_id" = ANY($1::varchar[])`;

/**
 * Publishes the llm_call.recorded events whose outbox rows the RecordCommitter has committed
 * (their calls are answered already), then has the rows deleted:
 *  - in commit order, one batch at a time, so a rollout's records reach Kafka in turn order;
 *  - a batch the broker refuses is retried with backoff until it goes through: the records are
 *    durable in PostgreSQL, so a broker outage delays them and loses nothing;
 *  - the ids of published events ride along with the next commit statement, which deletes
 *    their rows in the same write (under load, deleting costs no round trip); when no statement
 *    comes within `deleteDelayMs` they are deleted on their own;
 *  - the sweeper publishes rows nobody is publishing (`staleAfterMs` old: a gateway that died
 *    between commit and publish, or a restart): at start and every `sweepIntervalMs`.
 * A row can thus be published twice (a delete lost in a crash, two sweepers); the event id is
 * the call id and every consumer is idempotent by it, so that duplicates nothing downstream.
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
    private readonly sql: SqlClient,
    private readonly bus: MessageBus,
    private readonly opts: OutboxRelayOptions = {},
  ) {}

  /** Events not yet acknowledged by the broker. */
  get backlog(): number {
    return this.queue.length;
  }

  /** Events whose outbox rows were just committed (their calls may already be answered). */
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
    const done = this.queue.length === 0 && !this.publishing ? Promise.resolve(true) : new Promise<boolean>((r) => this.idle.push(() => r(true)));
    let timer: NodeJS.Timeout | undefined;
    const drained = await Promise.race([done, new Promise<boolean>((r) => (timer = setTimeout(() => r(false), timeoutMs)))]);
    clearTimeout(timer);
    this.stopped = true;
    this.wakeRetry?.();
    if (this.sweepTimer) clearTimeout(this.sweepTimer);
    await this.sweeping?.catch(() => undefined);
    await this.deletePublished().catch((err: unknown) => this.opts.warn?.('could not delete published outbox rows at shutdown (the sweeper republishes them; consumers dedupe)', { err }));
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
        if (this.failures++ % 50 === 0) this.opts.warn?.('publishing recorded calls failed; they stay in the outbox and are retried', { events: batch.length, backlog: this.queue.length, err });
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
      void this.deletePublished().catch((err: unknown) => this.opts.warn?.('could not delete published outbox rows (the sweeper republishes them; consumers dedupe)', { err }));
    }, this.opts.deleteDelayMs ?? 50);
    this.deleteTimer.unref();
  }

  private async deletePublished(): Promise<void> {
    const ids = this.takePublished();
    if (ids.length) await this.sql.query('gw_outbox_delete', OUTBOX_DELETE_SQL, [ids]);
  }

  /** Publishes and deletes stale rows, a batch at a time; returns how many were published. */
  sweep(): Promise<number> {
    if (this.sweeping) return this.sweeping;
    this.sweeping = this.sweepOnce().finally(() => (this.sweeping = null));
    return this.sweeping;
  }

  private async sweepOnce(): Promise<number> {
    if (this.opts.isReady && !this.opts.isReady()) return 0;
    const limit = this.opts.maxBatch ?? 256;
    const staleAfterS = (this.opts.staleAfterMs ?? 10_000) / 1000;
    let total = 0;
    const skip = new Set<string>();
    for (;;) {
      if (this.stopped) return total;
      const rows = await this.sql.query<OutboxRow>('gw_outbox_stale', STALE_SQL, [staleAfterS, limit + skip.size]);
      // Rows this instance is still publishing (a long broker outage) or deleting are left to it.
      const mine = new Set([...this.queue.map((e) => e.id), ...this.published]);
      const events: EventEnvelope[] = [];
      for (const r of rows) {
        if (mine.has(r.event_id) || skip.has(r.event_id)) continue;
        try {
          events.push(await this.rebuild(r));
        } catch (err) {
          // Unreadable by this version (e.g. a contract version it no longer supports), or its
          // capture row is gone: kept for an operator, not retried by this sweep.
          skip.add(r.event_id);
          this.opts.warn?.('outbox row cannot be decoded; left in place', { eventId: r.event_id, err });
        }
      }
      if (events.length === 0) return total;
      await this.bus.publish(events);
      await this.sql.query('gw_outbox_delete', OUTBOX_DELETE_SQL, [events.map((e) => e.id)]);
      total += events.length;
      this.opts.onPublished?.(events.length, 'sweep');
      if (rows.length < limit + skip.size) return total;
    }
  }

  /**
   * The event a row stores: its frame carries the turn relative to its request (the row holds
   * the reserved absolute turn) and, with prompt_from_capture, no prompt ids (rebuilt from the
   * call's capture chain, see the migration).
   */
  private async rebuild(r: OutboxRow): Promise<EventEnvelope> {
    const event = decodeEvent(r.frame);
    if (event.type !== 'llm_call.recorded') return event;
    const payload = { ...event.payload, turnIndex: Number(r.turn_index) };
    if (r.prompt_from_capture) {
      const prompt = await this.opts.promptOf?.(r.event_id);
      if (!prompt) throw new Error(`the prompt of ${r.event_id} cannot be rebuilt from its capture row`);
      payload.promptIds = Int32Array.from(prompt);
      payload.reusedPromptTokens = Number(r.reused_prompt_tokens);
    }
    return { ...event, payload };
  }
}
