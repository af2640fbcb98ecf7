import { z } from 'zod';
import { id, policyVersion, timestampMs } from './common';

/**
 * Evaluation rollouts: the eval split of a task set run pinned to one policy
 * version. The trainer asks (every K versions, and once before the first step) with
 * evaluation.requested; the rollout manager answers with evaluation.completed carrying that
 * version. Evaluation rollouts are never scheduled for training: their rollout.started says
 * `purpose: 'eval'` and their group ids start with `eval:`.
 */
export const evaluationRequestedV1 = z.object({
  evalId: id(),
  taskSetId: id(),
  policyVersion: policyVersion(),
  /** Samples per eval task (default 1). */
  samplesPerTask: z.number().int().positive().max(64).optional(),
  requestedAt: timestampMs(),
});
export type EvaluationRequestedV1 = z.infer<typeof evaluationRequestedV1>;

export const evaluationResultSchema = z.object({
  taskId: id(),
  rolloutId: id(),
  reward: z.number().finite().nullable(),
  success: z.boolean(),
  finishReason: z.string().min(1).max(32),
});

export const evaluationCompletedV1 = z.object({
  evalId: id(),
  taskSetId: id(),
  policyVersion: policyVersion(),
  results: z.array(evaluationResultSchema),
  /** Share of results with success (0 when there are none). */
  successRate: z.number().min(0).max(1),
  /** Mean reward over results with a reward (0 when there are none). */
  meanReward: z.number().finite(),
  /** Eval rollouts during which the served version moved past policyVersion (0 when pinned throughout). */
  versionDrift: z.number().int().nonnegative(),
  startedAt: timestampMs(),
  completedAt: timestampMs(),
});
export type EvaluationCompletedV1 = z.infer<typeof evaluationCompletedV1>;
