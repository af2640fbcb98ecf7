import { z } from 'zod';
import { id, policyVersion, timestampMs } from './common';

/**
 * The trainer consumed a train batch: its groups no longer count toward the staleness capacity
 * (DESIGN "Staleness": finished-but-untrained), and the Data Pool may prune its tokens once a
 * full checkpoint covers it (`checkpointed` on this or a later batch; a published version alone
 * is not a resume point). `outcome` 'trained' = at least one optimizer step was applied;
 * 'skipped' = consumed without a step (non-finite loss or gradient on every mini-batch).
 */
export const trainBatchTrainedV1 = z.object({
  batchId: id(),
  /** The batch's position in the Data Pool's sequence (train_batch.created.step). */
  batchStep: z.number().int().nonnegative(),
  runId: id().nullable(),
  /** Optimizer steps taken so far (mini-batches count one each). */
  trainerStep: z.number().int().nonnegative(),
  /** Policy version of the weights after this batch. */
  policyVersion: policyVersion(),
  groupIds: z.array(id()),
  trajectoryIds: z.array(id()),
  outcome: z.enum(['trained', 'skipped']),
  reason: z.string().max(2000).nullable(),
  /** Whether a full checkpoint (a resume point) now covers this batch. */
  checkpointed: z.boolean(),
  trainedAt: timestampMs(),
});
export type TrainBatchTrainedV1 = z.infer<typeof trainBatchTrainedV1>;
