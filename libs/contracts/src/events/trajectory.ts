import { z } from 'zod';
import { ROLLOUT_FINISH_REASONS } from './rollout';
import { id, policyVersion, timestampMs } from './common';

/**
 * A finished rollout assembled by the Data Pool: its calls (samples), reward and advantage.
 * `lossMasked` is compact filtering (DeepSWE): kept for statistics, masked out of the loss.
 */
export const trajectoryReadyV1 = z.object({
  trajectoryId: id(),
  rolloutId: id(),
  groupId: id(),
  taskId: id(),
  callIds: z.array(id()),
  finishReason: z.enum(ROLLOUT_FINISH_REASONS),
  reward: z.number().finite(),
  advantage: z.number().finite(),
  lossMasked: z.boolean(),
  minPolicyVersion: policyVersion(),
  maxPolicyVersion: policyVersion(),
  promptTokens: z.number().int().nonnegative(),
  outputTokens: z.number().int().nonnegative(),
  readyAt: timestampMs(),
});
export type TrajectoryReadyV1 = z.infer<typeof trajectoryReadyV1>;

/**
 * A rollout group the Data Pool has settled: every rollout completed or was dropped. 'ready':
 * its trajectories were scored and published (trajectory.ready); 'dropped': none of it will be
 * trained (reason: zero_variance, all_env_error, timeout: ...). retryRolloutIds: rollouts that
 * failed in the environment and should be retried. The rollout-manager releases staleness
 * capacity on it. Keyed by group id, on the trajectories topic.
 */
export const rolloutGroupSettledV1 = z.object({
  groupId: id(),
  taskId: id(),
  status: z.enum(['ready', 'dropped']),
  reason: z.string().max(2_000).nullable(),
  trajectoryIds: z.array(id()),
  retryRolloutIds: z.array(id()),
});
export type RolloutGroupSettledV1 = z.infer<typeof rolloutGroupSettledV1>;
