import { z } from 'zod';
import { id, policyVersion, timestampMs } from './common';

export const ROLLOUT_FINISH_REASONS = ['completed', 'max_context', 'max_steps', 'timeout', 'env_error', 'aborted'] as const;
export type RolloutFinishReason = (typeof ROLLOUT_FINISH_REASONS)[number];

export const rolloutStartedV1 = z.object({
  rolloutId: id(),
  groupId: id(),
  taskId: id(),
  taskSetId: id(),
  /** Index of this rollout within its group of G samples. */
  sampleIndex: z.number().int().nonnegative(),
  groupSize: z.number().int().positive(),
  agent: z.object({ kind: z.enum(['white-box', 'black-box']), name: z.string().min(1) }),
  policyVersionAtStart: policyVersion(),
  startedAt: timestampMs(),
});
export type RolloutStartedV1 = z.infer<typeof rolloutStartedV1>;

export const processRewardSchema = z.object({
  /** The LLM call the reward is attached to (a step of the trajectory). */
  callId: id(),
  value: z.number().finite(),
  label: z.string().max(200).optional(),
});

export const rolloutCompletedV1 = z.object({
  rolloutId: id(),
  groupId: id(),
  taskId: id(),
  finishReason: z.enum(ROLLOUT_FINISH_REASONS),
  /** Verifier outcome; null when the rollout never reached the verifier (env_error, aborted). */
  outcomeReward: z.number().finite().nullable(),
  processRewards: z.array(processRewardSchema),
  numCalls: z.number().int().nonnegative(),
  error: z.string().max(10_000).nullable(),
  completedAt: timestampMs(),
});
export type RolloutCompletedV1 = z.infer<typeof rolloutCompletedV1>;
