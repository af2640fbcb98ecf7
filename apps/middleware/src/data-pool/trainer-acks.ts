import type { EntityManager } from 'typeorm';
import type { EventEnvelope } from '@anvil/contracts';

/**
 * The trainer's acknowledgement of a batch (train_batch.trained): its batch statistics row learns
 * when and at which version it trained and whether a full checkpoint followed (retention prunes
 * behind those), and the run's scheduler row when the trainer last finished one (the adaptive
 * window measures the trainer's wait from it).
 */
export async function recordTrained(m: EntityManager, runId: string, event: EventEnvelope<'train_batch.trained'>): Promise<void> {
  const p = event.payload;
  await m.query(
    `UPDATE "data_pool_batch_stats" SET "trained_at" = to_timestamp($2::float8 / 1000.0), "trained_version" = $3, "checkpointed" = $4 WHERE "batch_id" = $1`,
    [p.batchId, event.occurredAt, p.policyVersion, p.checkpointed],
  );
  await m.query(
    `UPDATE "data_pool_scheduler" SET "last_trained_at" = greatest(coalesce("last_trained_at", to_timestamp(0)), to_timestamp($2::float8 / 1000.0)) WHERE "run_id" = $1`,
    [runId, event.occurredAt],
  );
}
