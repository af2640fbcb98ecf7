import type { Db } from '../sql';
import type { TrajectoryRow } from './ready-trajectories';

export interface OpenGroup {
  groupId: string;
  taskId: string;
  groupSize: number;
  openedMs: number;
}

/**
 * Locks the group's row until the transaction ends; null when it is not open. A rollout.started
 * that reopens the group takes the same lock, so its queue row is either seen by this settlement
 * or reopens the group after it commits.
 */
export async function lockOpenGroup(m: Db, groupId: string): Promise<OpenGroup | null> {
  const [g]: { status: string; task_id: string; group_size: number; opened_ms: string }[] = await m.query(
    `SELECT "status", "task_id", "group_size", (extract(epoch from "opened_at") * 1000)::bigint AS opened_ms FROM "data_pool_groups" WHERE "group_id" = $1 FOR UPDATE`,
    [groupId],
  );
  if (!g || g.status !== 'open') return null;
  return { groupId, taskId: g.task_id, groupSize: g.group_size, openedMs: Number(g.opened_ms) };
}

/** This wave's dropped queue rows, with their reasons (a reason the queue row already has is kept), settled. */
export async function markDropped(m: Db, dropped: { id: string; reason: string }[]): Promise<void> {
  if (!dropped.length) return;
  await m.query(
    `UPDATE "data_pool_queue" q SET "status" = 'dropped', "reason" = coalesce(q."reason", x."reason"), "settled_at" = now()
     FROM unnest($1::varchar[], $2::text[]) AS x("rollout_id", "reason") WHERE q."rollout_id" = x."rollout_id" AND q."settled_at" IS NULL`,
    [dropped.map((d) => d.id), dropped.map((d) => d.reason)],
  );
}

/**
 * The wave's trajectories (ready) and their queue rows (completed, with tokens, version, the
 * group's difficulty), one statement each for the whole wave: ragged call ids and per-call
 * advantages travel as JSON (float8 from JSON's shortest decimal is exact).
 */
export async function writeTrajectories(
  m: Db,
  rows: TrajectoryRow[],
  group: OpenGroup,
  now: number,
  difficulty: number | null,
): Promise<void> {
  if (!rows.length) return;
  const rowsJson = JSON.stringify(rows);
  const cols = `"id" varchar, "call_ids" text[], "finish_reason" varchar, "reward" float8, "advantage" float8, "loss_masked" boolean, "min_v" int, "max_v" int,
                "prompt_tokens" int, "output_tokens" int, "call_advantages" float8[], "tokens" int, "completed_ms" float8`;
  await m.query(
    `INSERT INTO "trajectories" ("id", "event_id", "rollout_id", "group_id", "task_id", "call_ids", "finish_reason", "reward", "advantage", "loss_masked",
       "min_policy_version", "max_policy_version", "prompt_tokens", "output_tokens", "ready_at", "status", "train_batch_id", "call_advantages")
     SELECT x."id", 'trajectory.ready:' || x."id", x."id", $2, $3, x."call_ids", x."finish_reason", x."reward", x."advantage", x."loss_masked",
       x."min_v", x."max_v", x."prompt_tokens", x."output_tokens", to_timestamp($4::float8 / 1000.0), 'ready', NULL, x."call_advantages"
     FROM jsonb_to_recordset($1::jsonb) AS x(${cols}) ON CONFLICT DO NOTHING`,
    [rowsJson, group.groupId, group.taskId, now],
  );
  await m.query(
    `UPDATE "data_pool_queue" q SET "status" = 'completed', "tokens" = x."tokens", "version" = x."min_v", "difficulty" = coalesce(q."difficulty", $2), "trajectory_id" = x."id",
       "completed_at" = to_timestamp(x."completed_ms" / 1000.0), "settled_at" = now()
     FROM jsonb_to_recordset($1::jsonb) AS x(${cols}) WHERE q."rollout_id" = x."id" AND q."settled_at" IS NULL`,
    [rowsJson, difficulty],
  );
}

export async function closeGroup(m: Db, groupId: string, status: 'ready' | 'dropped', reason: string | null): Promise<void> {
  await m.query(`UPDATE "data_pool_groups" SET "status" = $2, "reason" = $3, "settled_at" = now() WHERE "group_id" = $1`, [
    groupId,
    status,
    reason,
  ]);
}

/**
 * A group reopened without a new row (ingestion reopens only on a new queue row, so this should not
 * happen): closed again as it was, nothing to announce.
 */
export async function closeReopened(m: Db, groupId: string, anyTrained: boolean): Promise<void> {
  await m.query(
    `UPDATE "data_pool_groups" SET "status" = CASE WHEN $2 THEN 'ready' ELSE 'dropped' END, "settled_at" = now() WHERE "group_id" = $1`,
    [groupId, anyTrained],
  );
}
