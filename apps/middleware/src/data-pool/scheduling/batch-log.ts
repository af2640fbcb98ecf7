import type { Db } from '../sql';

/** One cut batch as the batch log (train_batches) records it. */
export interface BatchRecord {
  batchId: string;
  /** The id of the train_batch.created event that announces it. */
  eventId: string;
  step: number;
  policyVersion: number;
  trajectoryIds: string[];
  sampleIds: string[];
  /** Prompt + output tokens over the samples. */
  totalTokens: number;
  createdAt: number;
}

/**
 * The one writer of which batch a trajectory trains in. A cut records its batch and marks the
 * batch's trajectories scheduled in its own transaction (the pool does not read its
 * train_batch.created back to do it), and a batch its reader refused hands them back. Settlement
 * inserts trajectories ready; nothing else changes their status.
 */
export async function recordBatch(m: Db, b: BatchRecord): Promise<void> {
  await m.query(
    `INSERT INTO "train_batches" ("id", "event_id", "step", "policy_version", "trajectory_ids", "sample_ids", "num_samples", "num_tokens", "created_at") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, to_timestamp($9::float8 / 1000.0))`,
    [b.batchId, b.eventId, b.step, b.policyVersion, b.trajectoryIds, b.sampleIds, b.sampleIds.length, String(b.totalTokens), b.createdAt],
  );
  await m.query(`UPDATE "trajectories" SET "status" = 'scheduled', "train_batch_id" = $2 WHERE "id" = ANY($1::varchar[])`, [
    b.trajectoryIds,
    b.batchId,
  ]);
}

/** A refused batch's trajectories are ready again, in no batch (the batch log keeps the refused batch's row). */
export async function unscheduleBatch(m: Db, batchId: string): Promise<void> {
  await m.query(`UPDATE "trajectories" SET "status" = 'ready', "train_batch_id" = NULL WHERE "train_batch_id" = $1`, [batchId]);
}
