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
