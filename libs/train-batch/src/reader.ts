import type { DataSource, EntityManager } from 'typeorm';
import {
  decodePrefixTreeBlob,
  encodePrefixTreeBlob,
  PREFIX_TREE_LAYOUT,
  sha256Hex,
  type EventEnvelope,
  type PrefixTree,
  type TrainBatchV2,
} from '@anvil/contracts';

/** Where the Data Pool stores batch trees (migration 1796500000000). */
export const TRAIN_BATCH_BLOBS_TABLE = 'train_batch_blobs';

export type TrainBatchErrorReason = 'missing' | 'checksum' | 'layout' | 'mismatch' | 'version';

/** A batch the trainer must not train: refused (and, when a checksum fails, marked for re-cutting). */
export class TrainBatchError extends Error {
  override name = 'TrainBatchError';
  constructor(
    readonly reason: TrainBatchErrorReason,
    readonly batchId: string,
    readonly field: string,
    message: string,
  ) {
    super(`train batch ${batchId}: ${field}: ${message}`);
  }
}

/** The blob's sha256 or length differs from the event's: refused; the Data Pool re-cuts the batch. */
export class BatchChecksumError extends TrainBatchError {
  override name = 'BatchChecksumError';
  constructor(batchId: string, expected: string, actual: string) {
    super('checksum', batchId, 'blob.sha256', `expected ${expected}, the stored blob hashes to ${actual}`);
  }
}

type Queryable = Pick<DataSource | EntityManager, 'query'>;

export interface ReadTrainBatchOptions {
  /**
   * On a checksum mismatch, mark the blob refused (refused_at, refused_reason) so the Data Pool
   * re-cuts its trajectories into a new batch. Default true.
   */
  recordRefusal?: boolean;
}

function payloadOf(event: EventEnvelope<'train_batch.created'> | TrainBatchV2): TrainBatchV2 {
  if ('payload' in event) {
    if (event.version !== 2)
      throw new TrainBatchError(
        'version',
        (event.payload as { batchId?: string }).batchId ?? '?',
        'version',
        `train_batch.created v${event.version} carries its samples inline; only v2 is a claim-check`,
      );
    return event.payload;
  }
  return event;
}

/**
 * The packer's input for a train_batch.created v2 (claim-check): reads the batch's blob from
 * PostgreSQL by batch id, verifies its length and sha256 against the event, decodes the
 * 'anvil-prefix-tree/1' layout and checks it names the event's samples in order with their
 * advantages and loss weights. Never materialises a prompt.
 */
export async function readTrainBatch(
  event: EventEnvelope<'train_batch.created'> | TrainBatchV2,
  db: Queryable,
  opts: ReadTrainBatchOptions = {},
): Promise<PrefixTree> {
  const b = payloadOf(event);
  const rows: { blob: Buffer; layout: string }[] = await db.query(
    `SELECT "blob", "layout" FROM "${TRAIN_BATCH_BLOBS_TABLE}" WHERE "batch_id" = $1`,
    [b.batchId],
  );
  if (rows.length === 0)
    throw new TrainBatchError('missing', b.batchId, 'batchId', `no row in ${TRAIN_BATCH_BLOBS_TABLE} (pruned, or never written)`);
  const blob = Buffer.from(rows[0].blob);
  if (rows[0].layout !== PREFIX_TREE_LAYOUT || b.blob.layout !== PREFIX_TREE_LAYOUT)
    throw new TrainBatchError('layout', b.batchId, 'blob.layout', `unsupported layout ${rows[0].layout}`);
  const actual = sha256Hex(blob);
  if (actual !== b.blob.sha256 || blob.length !== b.blob.bytes) {
    if (opts.recordRefusal ?? true) {
      await db.query(
        `UPDATE "${TRAIN_BATCH_BLOBS_TABLE}" SET "refused_at" = now(), "refused_reason" = $2 WHERE "batch_id" = $1 AND "refused_at" IS NULL`,
        [b.batchId, `checksum: expected ${b.blob.sha256} (${b.blob.bytes} bytes), got ${actual} (${blob.length} bytes)`],
      );
    }
    throw new BatchChecksumError(b.batchId, b.blob.sha256, actual);
  }
  const tree = decodePrefixTreeBlob(blob);
  if (tree.tokens.length !== b.blob.nodes)
    throw new TrainBatchError('mismatch', b.batchId, 'blob.nodes', `event says ${b.blob.nodes} nodes, the blob has ${tree.tokens.length}`);
  if (tree.samples.length !== b.samples.length)
    throw new TrainBatchError('mismatch', b.batchId, 'samples', `event lists ${b.samples.length} samples, the blob ${tree.samples.length}`);
  b.samples.forEach((s, i) => {
    const t = tree.samples[i];
    if (t.sampleId !== s.sampleId || t.trajectoryId !== s.trajectoryId || t.groupId !== s.groupId)
      throw new TrainBatchError('mismatch', b.batchId, `samples[${i}].sampleId`, `event names ${s.sampleId}, the blob ${t.sampleId}`);
    // the blob stores float32: the event's float64 is authoritative
    t.advantage = s.advantage;
    t.lossWeight = s.lossWeight;
  });
  return tree;
}

/** Writes a batch's tree in the caller's transaction; returns what the event's `blob` names. */
export async function writeTrainBatchBlob(
  db: Queryable,
  batch: { batchId: string; runId: string | null; tree: PrefixTree },
): Promise<TrainBatchV2['blob']> {
  const { blob, sha256 } = encodePrefixTreeBlob(batch.tree);
  await db.query(
    `INSERT INTO "${TRAIN_BATCH_BLOBS_TABLE}" ("batch_id", "run_id", "layout", "sha256", "bytes", "nodes", "blob") VALUES ($1, $2, $3, $4, $5, $6, $7)`,
    [batch.batchId, batch.runId, PREFIX_TREE_LAYOUT, sha256, blob.length, batch.tree.tokens.length, blob],
  );
  return { store: 'postgres', sha256, bytes: blob.length, layout: PREFIX_TREE_LAYOUT, nodes: batch.tree.tokens.length };
}
