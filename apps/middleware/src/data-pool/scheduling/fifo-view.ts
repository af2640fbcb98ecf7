import { WindowedFifo, type WindowedFifoState } from '@anvil/rl';
import type { DataPoolConfig } from '../config';
import { msOf, type Db } from '../sql';

type FifoConfig = Pick<DataPoolConfig, 'runId' | 'window' | 'batchTrajectories'>;

/**
 * How many unconsumed (pending or completed) queue entries one Windowed-FIFO take can look at, from
 * the head: the scan moves the head on only over entries it picks (at most the batch's trajectory
 * count) and stops W entries (W <= N = inFlight, also for an adaptive window at its widest) past the
 * first entry it cannot pick. Entries beyond, and the taken or dropped ones between them, change
 * nothing in this round's take; later rounds reach them as the head moves. (A straggler behind that
 * many completed entries is checked against the head age limit once it is within reach, which is
 * when the window starts waiting on it.) Null in token-budget mode: a batch has no item bound.
 */
export function fifoReach(cfg: Pick<DataPoolConfig, 'batchTrajectories' | 'window'>): number | null {
  return cfg.batchTrajectories === undefined ? null : cfg.batchTrajectories + cfg.window.inFlight;
}

interface QueueRow {
  rollout_id: string;
  group_id: string;
  position: string;
  status: 'pending' | 'completed' | 'taken' | 'dropped';
  tokens: number | null;
  version: number | null;
  difficulty: number | null;
  submitted_ms: string;
  completed_ms: string | null;
}

export interface FifoView {
  fifo: WindowedFifo;
  /** Since when the trainer has been waiting for a batch (its last acknowledgement, when no unacknowledged batch exists), else null. */
  trainerWaitingSince: number | null;
}

/** The Windowed FIFO rebuilt from the queue rows (from the head on) and the scheduler row: any instance gets the same. */
export async function readFifo(db: Db, cfg: FifoConfig): Promise<FifoView> {
  const rows = await queueWithinReach(db, cfg);
  const passed = await passedPosition(db, cfg.runId, rows[0]?.position ?? null);
  const sched = await schedulerState(db, cfg.runId);
  const fifo = WindowedFifo.restore(cfg.window, {
    entries: rows.map((r) => ({
      id: r.rollout_id,
      position: Number(r.position),
      submittedAt: Number(r.submitted_ms),
      groupId: r.group_id,
      status: r.status,
      ...(r.difficulty !== null ? { difficulty: r.difficulty } : {}),
      ...(r.status === 'completed' || r.status === 'taken'
        ? { tokens: r.tokens ?? 0, completedAt: Number(r.completed_ms ?? r.submitted_ms) }
        : {}),
      ...(r.version !== null ? { version: r.version } : {}),
    })),
    passedPosition: passed,
    ...(cfg.window.window === 'adaptive' && sched.adaptive ? { adaptive: sched.adaptive } : {}),
  });
  return { fifo, trainerWaitingSince: sched.trainerWaitingSince };
}

/**
 * The queue from the head to the end of what one take can reach (fifoReach). A run that queues a
 * whole pass of tasks ahead keeps thousands of pending rows; reading them all every round would make
 * a round's cost grow with the length of the queue instead of with N and the batch.
 */
function queueWithinReach(db: Db, cfg: FifoConfig): Promise<QueueRow[]> {
  return db.query(
    `SELECT "rollout_id", "group_id", "task_id", "position", "status", "reason", "tokens", "version", "difficulty",
            (extract(epoch from "submitted_at") * 1000)::bigint AS submitted_ms, (extract(epoch from "completed_at") * 1000)::bigint AS completed_ms
     FROM "data_pool_queue" WHERE "run_id" = $1
       AND "position" >= coalesce((SELECT min("position") FROM "data_pool_queue" WHERE "run_id" = $1 AND "status" IN ('pending', 'completed')), 9223372036854775807)
       AND "position" < coalesce((SELECT "position" FROM "data_pool_queue" WHERE "run_id" = $1 AND "status" IN ('pending', 'completed') AND $2::integer IS NOT NULL
                                  ORDER BY "position" OFFSET $2::integer LIMIT 1), 9223372036854775807)
     ORDER BY "position"`,
    [cfg.runId, fifoReach(cfg)],
  );
}

/** The newest consumed (taken or dropped) position before the head: the FIFO's passed mark. */
async function passedPosition(db: Db, runId: string, head: string | null): Promise<number | null> {
  const [passed]: { p: string | null }[] = await db.query(
    `SELECT (SELECT max("position") FROM "data_pool_queue" WHERE "run_id" = $1 AND "status" IN ('taken', 'dropped') AND "position" < $2) AS p`,
    [runId, head ?? '9223372036854775807'],
  );
  return msOf(passed?.p);
}

/** The adaptive window's saved state, and since when the trainer waits: from its last acknowledgement when no batch it has not acknowledged exists. */
async function schedulerState(
  db: Db,
  runId: string,
): Promise<{ adaptive?: WindowedFifoState['adaptive']; trainerWaitingSince: number | null }> {
  const [sched]: { state: { adaptive?: WindowedFifoState['adaptive'] }; last_trained_ms: string | null; last_batch_ms: string | null }[] =
    await db.query(
      `SELECT "state", (extract(epoch from "last_trained_at") * 1000)::bigint AS last_trained_ms, (extract(epoch from "last_batch_at") * 1000)::bigint AS last_batch_ms
       FROM "data_pool_scheduler" WHERE "run_id" = $1`,
      [runId],
    );
  const lastTrained = msOf(sched?.last_trained_ms);
  const lastBatch = msOf(sched?.last_batch_ms);
  return {
    ...(sched?.state?.adaptive ? { adaptive: sched.state.adaptive } : {}),
    trainerWaitingSince: lastTrained !== null && (lastBatch === null || lastBatch <= lastTrained) ? lastTrained : null,
  };
}
