// The trainer's side of the Data Pool's claim-check contract: a v2 batch's tree is read by the
// shared reader (@anvil/train-batch: checksum verified, never materialising prompts), and the
// batch log for catch-up after a resume is rebuilt from the Data Pool's tables (batch stats by
// step + the stored blob), so a batch the bus already delivered before a crash is found again.
import { createEventAt, decodePrefixTreeBlob, type TrainBatchStats } from '@anvil/contracts';
import type { PrefixTree } from '@anvil/rl';
import { readTrainBatch } from '@anvil/train-batch';
import type { DataSource } from 'typeorm';
import type { BatchSource, TrainBatchEvent } from '../runtime';

interface LogRow {
  batch_id: string;
  run_id: string | null;
  step: number;
  stats: TrainBatchStats;
  created_at: Date;
  sha256: string;
  bytes: number;
  nodes: number;
  blob: Buffer;
}

export class PostgresBatchSource implements BatchSource {
  constructor(private readonly db: Pick<DataSource, 'query'>) {}

  tree(event: TrainBatchEvent): Promise<PrefixTree> {
    return readTrainBatch(event, this.db);
  }

  /**
   * This run's batches from `fromStep` on, rebuilt as train_batch.created v2 events (the event id
   * is derived from the batch id, so a copy the bus delivers too is recognised by step). Batches
   * whose blob was refused (re-cut under a new id) or pruned are not in the log.
   */
  async since(runId: string | null, fromStep: number): Promise<TrainBatchEvent[]> {
    const rows: LogRow[] = await this.db.query(
      `SELECT s."batch_id", s."run_id", s."step", s."stats", s."created_at", b."sha256", b."bytes", b."nodes", b."blob"
         FROM "data_pool_batch_stats" s JOIN "train_batch_blobs" b ON b."batch_id" = s."batch_id"
        WHERE s."run_id" IS NOT DISTINCT FROM $1 AND s."step" >= $2 AND b."refused_at" IS NULL AND s."pruned_at" IS NULL
        ORDER BY s."step"`,
      [runId, fromStep],
    );
    return rows.map((r) => {
      const tree = decodePrefixTreeBlob(Buffer.from(r.blob));
      const groupIds = [...new Set(tree.samples.map((s) => s.groupId))];
      const trajectoryIds = [...new Set(tree.samples.map((s) => s.trajectoryId))];
      return createEventAt(
        'train_batch.created',
        2,
        {
          batchId: r.batch_id,
          step: r.step,
          runId: r.run_id,
          trajectoryIds,
          groupIds,
          // the blob's float32 advantages and weights: the event's float64 values are not kept
          samples: tree.samples.map((s) => ({
            sampleId: s.sampleId,
            trajectoryId: s.trajectoryId,
            groupId: s.groupId,
            advantage: s.advantage,
            lossWeight: s.lossWeight,
          })),
          blob: { store: 'postgres', sha256: r.sha256.trim(), bytes: r.bytes, layout: 'anvil-prefix-tree/1', nodes: r.nodes },
          stats: r.stats,
          policyVersion: 0,
          createdAt: new Date(r.created_at).getTime(),
        },
        { key: r.run_id ?? r.batch_id, producer: 'trainer-catch-up', id: `catch-up:${r.batch_id}` },
      ) as unknown as TrainBatchEvent;
    });
  }
}
