import type { DataSource, EntityManager } from 'typeorm';
import { decodeEvent, encodeEvent, type EventEnvelope } from '@anvil/contracts';
import { OutboxRelay, type MessageBus, type OutboxRelayOptions, type OutboxRow, type OutboxStorage } from '@anvil/messaging';

export interface OutboxOptions extends OutboxRelayOptions {
  /**
   * Whose rows these are (e.g. 'trainer', 'data-pool'): several services share one database
   * and one table, and each sweeper publishes only its own producer's rows.
   */
  producer: string;
}

/** Rows per INSERT statement (3 parameters each, well under PostgreSQL's 65535). */
const INSERT_CHUNK = 500;

const STALE_SQL = `SELECT "event_id", "frame" FROM "event_outbox"
  WHERE "producer" = $1 AND "created_at" < now() - make_interval(secs => $2::float8)
  ORDER BY "seq" LIMIT $3`;

const DELETE_SQL = `DELETE FROM "event_outbox" WHERE "event_id" = ANY($1::varchar[])`;

const asList = (events: EventEnvelope | readonly EventEnvelope[]): readonly EventEnvelope[] =>
  Array.isArray(events) ? events : [events as EventEnvelope];

/**
 * Durable produce-after-write: an event is published if and only if the transaction that
 * stored it committed, at least once, in commit order.
 *
 * ```ts
 * const outbox = new Outbox(ds, bus, { producer: 'trainer' });
 * outbox.start();                                   // sweeper: publishes what a crash left behind
 * await outbox.transaction(async (manager) => {     // one transaction: state change + events
 *   await manager.insert(Checkpoint, row);
 *   await outbox.enqueue(manager, createEvent('weights.published', payload, { key, producer: 'trainer' }));
 * });                                               // committed: published now, row deleted after
 * await outbox.stop();                              // on shutdown: publishes what is queued
 * ```
 *
 * Inside a transaction someone else opens (e.g. ProcessedEventStore.withEventsOnce), call
 * `enqueue(manager, events)` in it and `committed(events)` once it has committed; events whose
 * `committed` call is missed (a crash) are published by the sweeper after `staleAfterMs`.
 * Consumers must be idempotent by event id (a crash between publish and delete republishes).
 */
export class Outbox {
  readonly relay: OutboxRelay;

  constructor(
    private readonly ds: DataSource,
    bus: Pick<MessageBus, 'publish'>,
    private readonly options: OutboxOptions,
  ) {
    this.relay = new OutboxRelay(new EventOutboxStorage(ds, options.producer), bus, options);
  }

  /**
   * Stores the events in the caller's transaction (encoded and validated first: an invalid
   * event throws its ContractError and so rolls the transaction back). Refuses to run outside
   * a transaction: the whole point is that the rows commit with the state change.
   */
  async enqueue(manager: EntityManager, events: EventEnvelope | readonly EventEnvelope[]): Promise<void> {
    if (!manager.queryRunner?.isTransactionActive)
      throw new Error('Outbox.enqueue needs the EntityManager of an open transaction (use outbox.transaction or ds.transaction)');
    const list = asList(events);
    const frames = list.map((e) => encodeEvent(e));
    for (let start = 0; start < list.length; start += INSERT_CHUNK) {
      const values: unknown[] = [];
      const tuples: string[] = [];
      for (let i = start; i < Math.min(list.length, start + INSERT_CHUNK); i++) {
        const n = values.length;
        tuples.push(`($${n + 1}, $${n + 2}, $${n + 3})`);
        values.push(list[i].id, this.options.producer, frames[i]);
      }
      await manager.query(
        `INSERT INTO "event_outbox" ("event_id", "producer", "frame") VALUES ${tuples.join(', ')} ON CONFLICT ("event_id") DO NOTHING`,
        values,
      );
    }
    this.pending.get(manager)?.push(...list);
  }

  /** After the commit of a transaction that enqueued `events`: publishes them now (in this order). */
  committed(events: EventEnvelope | readonly EventEnvelope[]): void {
    this.relay.enqueue(asList(events));
  }

  /**
   * Runs `work` in a new transaction and, once it has committed, publishes what `work`
   * enqueued through this outbox (`enqueue(manager, ...)` with the manager it was given).
   */
  async transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    const enqueued: EventEnvelope[] = [];
    const result = await this.ds.transaction(async (manager) => {
      // enqueue(manager, ...) records here what this transaction stored.
      this.pending.set(manager, enqueued);
      try {
        return await work(manager);
      } finally {
        this.pending.delete(manager);
      }
    });
    this.committed(enqueued);
    return result;
  }

  private readonly pending = new WeakMap<EntityManager, EventEnvelope[]>();

  /** Starts the sweeper (first sweep at once, then every `sweepIntervalMs`). */
  start(): void {
    this.relay.start();
  }

  /** Publishes what is queued (within `timeoutMs`), deletes published rows, stops. True when nothing was left. */
  stop(timeoutMs = 10_000): Promise<boolean> {
    return this.relay.drain(timeoutMs);
  }

  /** One sweep now: publishes rows at least `staleAfterMs` old. Returns how many. */
  sweep(): Promise<number> {
    return this.relay.sweep();
  }

  /** Rows of this producer still in the table (published or not): for tests and metrics. */
  async pendingRows(): Promise<number> {
    const [{ n }]: { n: string }[] = await this.ds.query(`SELECT count(*) AS "n" FROM "event_outbox" WHERE "producer" = $1`, [
      this.options.producer,
    ]);
    return Number(n);
  }
}

class EventOutboxStorage implements OutboxStorage {
  constructor(
    private readonly ds: DataSource,
    private readonly producer: string,
  ) {}

  async staleRows(staleAfterMs: number, limit: number): Promise<OutboxRow[]> {
    if (!this.ds.isInitialized) return [];
    const rows: { event_id: string; frame: Uint8Array }[] = await this.ds.query(STALE_SQL, [this.producer, staleAfterMs / 1000, limit]);
    return rows.map((r) => ({ id: r.event_id, event: () => decodeEvent(r.frame) as EventEnvelope }));
  }

  async deleteRows(ids: readonly string[]): Promise<void> {
    await this.ds.query(DELETE_SQL, [ids]);
  }
}
