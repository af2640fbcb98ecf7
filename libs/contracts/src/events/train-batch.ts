import { z } from 'zod';
import { float32Array, int32Array, uint32Array } from '../codec/typed-array-schemas';
import { id, policyVersion, timestampMs } from './common';

/** One training sample = one LLM call: loss only on the output ids. */
export const trainSampleSchema = z
  .object({
    sampleId: id(),
    trajectoryId: id(),
    groupId: id(),
    promptIds: int32Array(),
    outputIds: int32Array(),
    /** π_old: the behaviour logprobs recorded at generation time. */
    behaviourLogprobs: float32Array(),
    outputVersions: uint32Array(),
    advantage: z.number().finite(),
    /** 0 for compact-filtered trajectories (statistics only). */
    lossWeight: z.number().finite().nonnegative(),
  })
  .superRefine((s, ctx) => {
    const n = s.outputIds.length;
    if (s.behaviourLogprobs.length !== n || s.outputVersions.length !== n) {
      ctx.addIssue({ code: 'custom', message: 'outputIds, behaviourLogprobs and outputVersions must have equal length' });
    }
  });
export type TrainSample = z.infer<typeof trainSampleSchema>;

/**
 * A batch scheduled by the Windowed-FIFO scheduler. Samples travel inline (binary frame),
 * so a trainer in any language needs nothing but this event.
 */
export const trainBatchV1 = z.object({
  batchId: id(),
  /** Optimizer step this batch is meant for. */
  step: z.number().int().nonnegative(),
  trajectoryIds: z.array(id()),
  samples: z.array(trainSampleSchema),
  /** Policy version the trainer held when the batch was cut (for staleness accounting). */
  policyVersion: policyVersion(),
  createdAt: timestampMs(),
});
export type TrainBatchV1 = z.infer<typeof trainBatchV1>;

/** Per-batch statistics the Data Pool records (DESIGN "Windowed FIFO", "Staleness"). */
export const trainBatchStatsSchema = z.object({
  trajectories: z.number().int().nonnegative(),
  samples: z.number().int().nonnegative(),
  groups: z.number().int().nonnegative(),
  /** Prompt + output tokens summed over samples (what unmerged training would compute). */
  totalTokens: z.number().int().nonnegative(),
  /** Nodes of the prefix tree. */
  uniqueTokens: z.number().int().nonnegative(),
  outputTokens: z.number().int().nonnegative(),
  /** 1 - uniqueTokens / totalTokens. */
  sharing: z.number().min(0).max(1),
  /** Staleness in policy versions per output token against policyVersion. */
  staleness: z.object({
    k: z.number().int().nonnegative(),
    mean: z.number().nonnegative(),
    max: z.number().int().nonnegative(),
    shareOlderThanK: z.number().min(0).max(1),
  }),
  /** Staleness in queue positions: the newest submitted position at the cut minus each trajectory's. */
  positionLag: z.object({ mean: z.number().nonnegative(), max: z.number().int().nonnegative() }),
  /** How far each trajectory was taken ahead of the queue head (Windowed FIFO out-of-order distance). */
  outOfOrder: z.object({ mean: z.number().nonnegative(), max: z.number().int().nonnegative() }),
  /** Difficulty mix: mean task difficulty of the batch against the population seen so far (null: not reported). */
  difficulty: z.object({ batchMean: z.number().nullable(), populationMean: z.number().nullable() }),
  /** Compact-filtered trajectories in the batch (kept for statistics, weight 0). */
  lossMasked: z.number().int().nonnegative(),
  /** How long the trainer waited for this batch (ms since it acknowledged the previous one; null for the first). */
  trainerWaitMs: z.number().nonnegative().nullable(),
});
export type TrainBatchStats = z.infer<typeof trainBatchStatsSchema>;

/** Per-sample metadata of a claim-check batch: one LLM call of a trajectory. */
export const trainBatchSampleMetaSchema = z.object({
  sampleId: id(),
  trajectoryId: id(),
  groupId: id(),
  advantage: z.number().finite(),
  /** 0 for compact-filtered trajectories (statistics only). */
  lossWeight: z.number().finite().nonnegative(),
});

/**
 * v2: a claim-check (DESIGN "Linear in unique tokens"). The event names the batch, its
 * trajectories and groups, per-sample advantages and loss weights, and where its tokens are:
 * a prefix tree in layout 'anvil-prefix-tree/1' (a safetensors file, see
 * codec/prefix-tree-blob.ts and schemas/layouts/anvil-prefix-tree-1.md) stored in PostgreSQL
 * table `train_batch_blobs` (column `blob` bytea, read by `batch_id`), with its sha256. A
 * reader that finds a different checksum refuses the batch; the Data Pool re-cuts it.
 */
export const trainBatchV2 = z
  .object({
    batchId: id(),
    step: z.number().int().nonnegative(),
    runId: id().nullable(),
    trajectoryIds: z.array(id()),
    groupIds: z.array(id()),
    samples: z.array(trainBatchSampleMetaSchema),
    blob: z.object({
      store: z.literal('postgres'),
      /** Lower-case hex sha256 of the whole blob. */
      sha256: z.string().regex(/^[0-9a-f]{64}$/),
      bytes: z.number().int().positive(),
      layout: z.literal('anvil-prefix-tree/1'),
      nodes: z.number().int().nonnegative(),
    }),
    stats: trainBatchStatsSchema,
    /** Policy version the trainer held when the batch was cut (for staleness accounting). */
    policyVersion: policyVersion(),
    createdAt: timestampMs(),
  })
  .superRefine((b, ctx) => {
    if (b.trajectoryIds.length === 0)
      ctx.addIssue({ code: 'custom', path: ['trajectoryIds'], message: 'a batch has at least one trajectory' });
    const known = new Set(b.trajectoryIds);
    b.samples.forEach((s, i) => {
      if (!known.has(s.trajectoryId))
        ctx.addIssue({ code: 'custom', path: ['samples', i, 'trajectoryId'], message: `${s.trajectoryId} is not in trajectoryIds` });
    });
  });
export type TrainBatchV2 = z.infer<typeof trainBatchV2>;
