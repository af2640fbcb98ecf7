import type { DataSource, EntityManager } from 'typeorm';
import type { AnyEventEnvelope } from '@anvil/contracts';
import { ProcessedEventStore } from '@anvil/persistence';
import { EventStore } from './projections';
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
        for (const e of fresh) await this.applyPoolEvent(e, manager);
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

  private async applyPoolEvent(event: AnyEventEnvelope, m: EntityManager): Promise<void> {
    switch (event.type) {
      case 'rollout.started': {
        const p = event.payload as typeof event.payload & { queuePosition?: number; purpose?: 'train' | 'eval' };
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
          await m.query(`UPDATE "data_pool_groups" SET "status" = 'open', "opened_at" = to_timestamp($2::float8 / 1000.0) WHERE "group_id" = $1 AND "status" <> 'open'`, [p.groupId, p.startedAt]);
        return;
      }
      case 'train_batch.trained': {
        const p = event.payload;
        await m.query(`UPDATE "data_pool_batch_stats" SET "trained_at" = to_timestamp($2::float8 / 1000.0), "trained_version" = $3, "checkpointed" = $4 WHERE "batch_id" = $1`, [
          p.batchId,
          event.occurredAt,
          p.policyVersion,
          p.checkpointed,
        ]);
        await m.query(`UPDATE "data_pool_scheduler" SET "last_trained_at" = greatest(coalesce("last_trained_at", to_timestamp(0)), to_timestamp($2::float8 / 1000.0)) WHERE "run_id" = $1`, [
          this.runId,
          event.occurredAt,
        ]);
        return;
      }
      default:
        return;
    }
  }
}
