import type { DataSource } from 'typeorm';
import { returned } from './sql';

/**
 * Prunes what lies behind the run's resume point: the call tokens (llm_calls rows of their
 * trajectories) and the claim-check blobs of trained batches, and takes them out of the batch
 * log (pruned_at). The resume point is the newest FULL checkpoint (weights + AdamW + data
 * position): train_batch.trained `checkpointed` marks the batch after which the trainer wrote
 * one, so a resume starts at the next step and every batch at or before a checkpointed one is
 * no longer needed. A published version alone is not a resume point (the trainer publishes
 * weight-only versions between full checkpoints and, after a crash, trains the batches since
 * its newest full checkpoint again from this log), so weights.published does not prune.
 * Statistics rows (batch stats, trajectories, train_batches) stay.
 */
export async function pruneTrained(ds: DataSource, runId: string): Promise<{ batches: number; calls: number }> {
  const due: { batch_id: string }[] = await ds.query(
    `SELECT s."batch_id" FROM "data_pool_batch_stats" s WHERE s."run_id" = $1 AND s."pruned_at" IS NULL AND s."trained_at" IS NOT NULL
       AND EXISTS (SELECT 1 FROM "data_pool_batch_stats" l WHERE l."run_id" = s."run_id" AND l."step" >= s."step" AND l."checkpointed")`,
    [runId],
  );
  let calls = 0;
  for (const { batch_id } of due) {
    await ds.transaction(async (m) => {
      const gone = returned(
        await m.query(
          `DELETE FROM "llm_calls" WHERE "rollout_id" IN (SELECT "rollout_id" FROM "data_pool_queue" WHERE "batch_id" = $1) RETURNING 1`,
          [batch_id],
        ),
      );
      calls += gone.length;
      await m.query(`DELETE FROM "train_batch_blobs" WHERE "batch_id" = $1`, [batch_id]);
      await m.query(`UPDATE "data_pool_batch_stats" SET "pruned_at" = now() WHERE "batch_id" = $1`, [batch_id]);
    });
  }
  return { batches: due.length, calls };
}
