import type { DataSource } from 'typeorm';
import { returned } from '../sql';
import { unscheduleBatch } from './batch-log';

/**
 * Batches a reader refused (checksum): their trajectories go back to the queue and are cut again
 * under a new batch id, one transaction per refused batch. Returns how many trajectories went back.
 */
export async function requeueRefused(
  ds: DataSource,
  runId: string,
  warn?: (msg: string, fields: Record<string, unknown>) => void,
): Promise<number> {
  const refused: { batch_id: string }[] = await ds.query(
    `SELECT "batch_id" FROM "train_batch_blobs" WHERE "run_id" = $1 AND "refused_at" IS NOT NULL AND "recut_batch_id" IS NULL`,
    [runId],
  );
  let n = 0;
  for (const { batch_id } of refused) {
    await ds.transaction(async (m) => {
      const back = returned(
        await m.query(
          `UPDATE "data_pool_queue" SET "status" = 'completed', "batch_id" = NULL WHERE "batch_id" = $1 AND "status" = 'taken' RETURNING 1`,
          [batch_id],
        ),
      );
      await unscheduleBatch(m, batch_id);
      await m.query(`UPDATE "train_batch_blobs" SET "recut_batch_id" = 'requeued' WHERE "batch_id" = $1`, [batch_id]);
      n += back.length;
    });
    warn?.('train batch refused by its reader; trajectories re-queued', { batchId: batch_id });
  }
  return n;
}
