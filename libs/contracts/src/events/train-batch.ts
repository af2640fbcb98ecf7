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
