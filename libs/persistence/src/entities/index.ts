import { Checkpoint } from './checkpoint.entity';
import { GatewayCall } from './gateway-call.entity';
import { GatewayPolicyState } from './gateway-policy-state.entity';
import { GatewaySession } from './gateway-session.entity';
import { LlmCall } from './llm-call.entity';
import { PolicyActivation } from './policy-activation.entity';
import { PolicyVersion } from './policy-version.entity';
import { ProcessedEvent } from './processed-event.entity';
import { Reward } from './reward.entity';
import { Rollout } from './rollout.entity';
import { RolloutGroup } from './rollout-group.entity';
import { Task } from './task.entity';
import { TaskSet } from './task-set.entity';
import { TrainBatch } from './train-batch.entity';
import { Trajectory } from './trajectory.entity';

export {
  Checkpoint,
  GatewayCall,
  GatewayPolicyState,
  GatewaySession,
  LlmCall,
  PolicyActivation,
  PolicyVersion,
  ProcessedEvent,
  Reward,
  Rollout,
  RolloutGroup,
  Task,
  TaskSet,
  TrainBatch,
  Trajectory,
};
export type { GatewaySessionStatus } from './gateway-session.entity';
export type { LlmFinishReason, SamplingParams } from './llm-call.entity';
export type { RewardKind } from './reward.entity';
export type { RolloutStatus } from './rollout.entity';
export type { TrajectoryStatus } from './trajectory.entity';
export { ID_LENGTH, type JsonObject, type JsonValue } from './columns';

/** Every entity, registered explicitly (no globs: the same list works from src and dist). */
export const ENTITIES = [
  TaskSet,
  Task,
  RolloutGroup,
  Rollout,
  LlmCall,
  Reward,
  Trajectory,
  TrainBatch,
  Checkpoint,
  PolicyVersion,
  PolicyActivation,
  ProcessedEvent,
  GatewaySession,
  GatewayCall,
  GatewayPolicyState,
];
