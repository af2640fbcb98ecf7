import type { EntityManager } from 'typeorm';
import type { EventEnvelope } from '@anvil/contracts';
import { firstPerRollout } from './projections';

type StartEvent = EventEnvelope<'rollout.started'>;

/** A start's payload with the optional fields the Data Pool reads (the rollout-manager sets them). */
function startPayload(e: StartEvent) {
  return e.payload as typeof e.payload & { queuePosition?: number; purpose?: 'train' | 'eval' };
}

/** True for a training rollout's start: evaluation rollouts are never trained on, so never queued. */
export const isTrainStart = (e: StartEvent): boolean => startPayload(e).purpose !== 'eval';

/**
 * The scheduler's inputs from rollout.started, the one path that queues a start (one event or a
 * fetched run of them): a row per group and a queue row per training rollout at its queue
 * position (the rollout-manager's submission order, `queuePosition`; else arrival order, from a
 * counter on the run's scheduler row whose row lock orders concurrent partitions). A group already
 * settled that gets a new rollout (an environment failure's retry, or a start that arrived after
 * its group timed out) is reopened, with its own timeout from that start on: left settled, the new
 * row would stay pending and hold the Windowed FIFO's head forever.
 */
export class RolloutQueue {
  constructor(private readonly runId: string) {}

  /** Queues the training starts among `events` (in their order; a rollout started twice keeps its first start). */
  async queueStarts(events: readonly StartEvent[], m: EntityManager): Promise<void> {
    const starts = firstPerRollout(events.filter(isTrainStart)).map(startPayload);
    if (starts.length === 0) return;
    const positions = await this.positionsOf(starts, m);
    const queued = await this.insertRows(starts, positions, m);
    await this.reopenSettledGroups(starts, queued, m);
  }

  /** Each start's queue position: its own, or the next of the run's arrival counter (reserved for all of them in one statement). */
  private async positionsOf(starts: ReturnType<typeof startPayload>[], m: EntityManager): Promise<number[]> {
    const counted = starts.filter((p) => p.queuePosition === undefined).length;
    let next = 0;
    if (counted > 0) {
      const [{ first }]: { first: string }[] = await m.query(
        `INSERT INTO "data_pool_scheduler" ("run_id", "next_position") VALUES ($1, $2)
         ON CONFLICT ("run_id") DO UPDATE SET "next_position" = "data_pool_scheduler"."next_position" + $2 RETURNING "next_position" - $2 AS first`,
        [this.runId, counted],
      );
      next = Number(first);
    }
    return starts.map((p) => p.queuePosition ?? next++);
  }

  /**
   * Creates each group, or locks its row (the no-op update) so that a settlement running now either
   * saw the new queue rows or finishes before the reopen reads the status; then inserts the queue
   * rows. A clash of positions is an error (dead-lettered with its reason), never a silent skip.
   * Returns the rollouts newly queued.
   */
  private async insertRows(starts: ReturnType<typeof startPayload>[], positions: number[], m: EntityManager): Promise<Set<string>> {
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
        starts.map((p) => p.rolloutId),
        starts.map((p) => p.groupId),
        starts.map((p) => p.taskId),
        starts.map((p) => p.groupSize),
        positions,
        starts.map((p) => p.startedAt),
      ],
    );
    return new Set(queued.map((r) => r.rollout_id));
  }

  /** Settled groups that got a new queue row open again, at the start of their first new rollout. */
  private async reopenSettledGroups(starts: ReturnType<typeof startPayload>[], queued: Set<string>, m: EntityManager): Promise<void> {
    const reopenAt = new Map<string, number>();
    for (const p of starts) if (queued.has(p.rolloutId) && !reopenAt.has(p.groupId)) reopenAt.set(p.groupId, p.startedAt);
    if (reopenAt.size === 0) return;
    await m.query(
      `UPDATE "data_pool_groups" g SET "status" = 'open', "opened_at" = to_timestamp(x."started_ms" / 1000.0)
       FROM unnest($1::varchar[], $2::float8[]) AS x("group_id", "started_ms") WHERE g."group_id" = x."group_id" AND g."status" <> 'open'`,
      [[...reopenAt.keys()], [...reopenAt.values()]],
    );
  }
}
