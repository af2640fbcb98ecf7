import { z } from 'zod';
import { callsRefusedSchema } from '../api/sessions';
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
  /**
   * Submission order of the rollout (strictly increasing per rollout manager database; the
   * Windowed FIFO orders by it). Optional so events written before it existed stay valid.
   */
  queuePosition: z.number().int().nonnegative().optional(),
  /** 'eval' rollouts are never scheduled for training (absent = 'train'). */
  purpose: z.enum(['train', 'eval']).optional(),
  /** The evaluation this rollout belongs to (purpose 'eval'). */
  evalId: id().optional(),
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
  /** Current policy version when the rollout ended (optional: absent in older events). */
  policyVersionAtEnd: policyVersion().optional(),
  /** Policy versions activated between the rollout's start and end, both counted (1 = never crossed a weight update). */
  versionsSpanned: z.number().int().positive().optional(),
  /** Whether the verifier judged the task solved (null when it never ran). */
  success: z.boolean().nullable().optional(),
  /**
   * Calls of the rollout's gateway session refused by its call limits (answered 429, recorded
   * nowhere): over its call budget (the rollout then ends as max_steps) and over its rate limit.
   * Optional: absent in older events.
   */
  callsRefused: callsRefusedSchema.optional(),
});
export type RolloutCompletedV1 = z.infer<typeof rolloutCompletedV1>;
