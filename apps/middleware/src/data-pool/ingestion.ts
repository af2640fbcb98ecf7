import type { DataSource, EntityManager } from 'typeorm';
import type { AnyEventEnvelope, EventEnvelope } from '@anvil/contracts';
import { ProcessedEventStore } from '@anvil/persistence';
import { EventStore, firstPerRollout } from './projections';
import { returned } from './pool';

/**
 * The Data Pool's write path, free of Nest so benchmarks and the embedded host use the very
 * same code: each event is applied and marked processed for this consumer group in ONE
 * transaction, so a redelivery (the bus is at-least-once) changes nothing. Besides the
 * projections it keeps the scheduler's inputs: a queue row per training rollout (its queue
 * position: rollout.started `queuePosition`, else arrival order), a row per group, and the
 * trainer's acknowledgements (train_batch.trained).
 */
export class DataPoolIngestion {
  private readonly events: EventStore;
  private readonly processed: ProcessedEventStore;

  constructor(
    dataSource: DataSource,
    private readonly consumer: string,
    private readonly runId = 'default',
  ) {
    this.events = new EventStore(dataSource);
    this.processed = new ProcessedEventStore(dataSource);
  }

  /**
   * The batch path: one transaction marks and applies every event of the batch that this
   * consumer had not processed yet. Returns the ids that were new.
   */
  ingestBatch(events: readonly AnyEventEnvelope[]): Promise<ReadonlySet<string>> {
    return this.processed.withEventsOnce(
      this.consumer,
      events.map((e) => e.id),
      async (manager, freshIds) => {
        const fresh = events.filter((e) => freshIds.has(e.id));
        await this.events.applyEvents(fresh, manager);
        // consecutive train starts with queue positions are queued together; the rest one by one, in order
        let starts: EventEnvelope<'rollout.started'>[] = [];
        for (const e of fresh) {
          if (e.type === 'rollout.started') {
            const p = startPayload(e);
            if (p.purpose !== 'eval' && p.queuePosition !== undefined) {
              starts.push(e);
              continue;
            }
          }
          await this.queueStarts(starts, manager);
          starts = [];
          await this.applyPoolEvent(e, manager);
        }
        await this.queueStarts(starts, manager);
      },
    );
  }

  /** Returns false when this consumer had already processed the event. */
  ingest(event: AnyEventEnvelope): Promise<boolean> {
    return this.processed.withEventOnce(this.consumer, event.id, async (manager) => {
      await this.events.applyEvent(event, manager);
      await this.applyPoolEvent(event, manager);
    });
  }

  /**
   * What applyPoolEvent does for each of a run of train rollout.started events that carry their
   * queue position, in two statements instead of three per event: every group created or locked
   * (its row lock, as there), the queue rows inserted, then the settled groups that got a new row
   * reopened with the start of their first new rollout.
   */
  private async queueStarts(events: readonly EventEnvelope<'rollout.started'>[], m: EntityManager): Promise<void> {
    if (events.length <= 1) {
      for (const e of events) await this.applyPoolEvent(e, m);
      return;
    }
    const ps = firstPerRollout(events).map(startPayload);
    // a clash of positions is an error (dead-lettered with its reason), never a silent skip
    const queued: { rollout_id: string }[] = await m.query(
      `WITH "v" AS (SELECT * FROM unnest($2::varchar[], $3::varchar[], $4::varchar[], $5::int[], $6::bigint[], $7::float8[])
                    AS v("rollout_id", "group_id", "task_id", "group_size", "position", "started_ms")),
            "g" AS (INSERT INTO "data_pool_groups" ("group_id", "run_id", "task_id", "group_size", "opened_at")
                    SELECT DISTINCT ON ("group_id") "group_id", $1, "task_id", "group_size", to_timestamp("started_ms" / 1000.0) FROM "v" ORDER BY "group_id", "position"
                    ON CONFLICT ("group_id") DO UPDATE SET "status" = "data_pool_groups"."status")
       INSERT INTO "data_pool_queue" ("rollout_id", "run_id", "group_id", "task_id", "position", "submitted_at")
       SELECT "rollout_id", $1, "group_id", "task_id", "position", to_timestamp("started_ms" / 1000.0) FROM "v" ON CONFLICT ("rollout_id") DO NOTHING RETURNING "rollout_id"`,
      [
        this.runId,
        ps.map((p) => p.rolloutId),
        ps.map((p) => p.groupId),
        ps.map((p) => p.taskId),
        ps.map((p) => p.groupSize),
        ps.map((p) => p.queuePosition),
        ps.map((p) => p.startedAt),
      ],
    );
    const fresh = new Set(queued.map((r) => r.rollout_id));
    const reopenAt = new Map<string, number>();
    for (const p of ps) if (fresh.has(p.rolloutId) && !reopenAt.has(p.groupId)) reopenAt.set(p.groupId, p.startedAt);
    if (reopenAt.size === 0) return;
    await m.query(
      `UPDATE "data_pool_groups" g SET "status" = 'open', "opened_at" = to_timestamp(x."started_ms" / 1000.0)
       FROM unnest($1::varchar[], $2::float8[]) AS x("group_id", "started_ms") WHERE g."group_id" = x."group_id" AND g."status" <> 'open'`,
      [[...reopenAt.keys()], [...reopenAt.values()]],
    );
  }

  private async applyPoolEvent(event: AnyEventEnvelope, m: EntityManager): Promise<void> {
    switch (event.type) {
      case 'rollout.started': {
        const p = startPayload(event);
        if (p.purpose === 'eval') return; // evaluation rollouts are never trained on
        // Creates the group, or locks its row (the no-op update) so that a settlement running now
        // either saw this rollout's queue row or finishes before the reopen below reads the status.
        await m.query(
          `INSERT INTO "data_pool_groups" ("group_id", "run_id", "task_id", "group_size", "opened_at") VALUES ($1, $2, $3, $4, to_timestamp($5::float8 / 1000.0))
           ON CONFLICT ("group_id") DO UPDATE SET "status" = "data_pool_groups"."status"`,
          [p.groupId, this.runId, p.taskId, p.groupSize, p.startedAt],
        );
        // queue position: the rollout-manager's submission order, else arrival order (a counter
        // on the run's scheduler row: its row lock orders concurrent partitions)
        let position = p.queuePosition ?? null;
        if (position === null) {
          const [{ pos }]: { pos: string }[] = await m.query(
            `INSERT INTO "data_pool_scheduler" ("run_id", "next_position") VALUES ($1, 1)
             ON CONFLICT ("run_id") DO UPDATE SET "next_position" = "data_pool_scheduler"."next_position" + 1 RETURNING "next_position" - 1 AS pos`,
            [this.runId],
          );
          position = Number(pos);
        }
        // a clash of positions is an error (dead-lettered with its reason), never a silent skip
        const queued = returned(
          await m.query(
            `INSERT INTO "data_pool_queue" ("rollout_id", "run_id", "group_id", "task_id", "position", "submitted_at")
             VALUES ($1, $2, $3, $4, $5, to_timestamp($6::float8 / 1000.0)) ON CONFLICT ("rollout_id") DO NOTHING RETURNING 1`,
            [p.rolloutId, this.runId, p.groupId, p.taskId, position, p.startedAt],
          ),
        );
        // A new rollout of a group already settled (an environment failure's retry, or a start that
        // arrived after its group timed out) reopens it: the next settlement handles the new row,
        // with its own timeout from now on. Without this the row would stay pending and hold the
        // Windowed FIFO's head forever.
        if (queued.length > 0)
          await m.query(
            `UPDATE "data_pool_groups" SET "status" = 'open', "opened_at" = to_timestamp($2::float8 / 1000.0) WHERE "group_id" = $1 AND "status" <> 'open'`,
            [p.groupId, p.startedAt],
          );
        return;
      }
      case 'train_batch.trained': {
        const p = event.payload;
        await m.query(
          `UPDATE "data_pool_batch_stats" SET "trained_at" = to_timestamp($2::float8 / 1000.0), "trained_version" = $3, "checkpointed" = $4 WHERE "batch_id" = $1`,
          [p.batchId, event.occurredAt, p.policyVersion, p.checkpointed],
        );
        await m.query(
          `UPDATE "data_pool_scheduler" SET "last_trained_at" = greatest(coalesce("last_trained_at", to_timestamp(0)), to_timestamp($2::float8 / 1000.0)) WHERE "run_id" = $1`,
          [this.runId, event.occurredAt],
        );
        return;
      }
      default:
        return;
    }
  }
}

/** A start's payload with the optional fields the Data Pool reads (the rollout-manager sets them). */
function startPayload(e: EventEnvelope<'rollout.started'>) {
  return e.payload as typeof e.payload & { queuePosition?: number; purpose?: 'train' | 'eval' };
}
