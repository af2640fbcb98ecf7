import type { Environment } from '../environments/types';
import type { RolloutRow } from '../state-store';
import type { StoredTask } from '../tasks/jsonl';
import { verifierSpecSchema, type RolloutLimits, type TaskSetSpec, type VerifierSpec } from '../tasks/task-set';
import type { CompletedFields } from './events';
import type { GroupState } from './group-state';
import { samplerSeed } from './sampler-seed';

/** What every attempt of one rollout shares, fixed as it takes its slot. */
export interface RolloutContext {
  group: GroupState;
  rollout: RolloutRow;
  spec: TaskSetSpec;
  task: StoredTask;
  env: Environment | null;
  purpose: 'train' | 'eval';
  limits: RolloutLimits;
  maxSteps: number;
  verifier: VerifierSpec;
  seed: number;
  versionAtStart: number;
  /** performance.now() as the rollout took its slot. */
  t0: number;
  /** The runtime's stop (not an attempt's timeout). */
  stopSignal: AbortSignal;
}

/** What rollout.completed says of how a rollout went. */
export type RolloutResult = Omit<CompletedFields, 'rolloutId' | 'groupId' | 'taskId' | 'versionAtStart'>;

/** A rollout that has not ended otherwise: completed, not scored yet. */
export function unscored(): RolloutResult {
  return { finishReason: 'completed', outcomeReward: null, processRewards: [], numCalls: 0, error: null, success: null };
}

/** A rollout's step limit: its task set's, else its environment's for the task, else 16. */
export function maxStepsOf(spec: Pick<TaskSetSpec, 'limits'>, env: Environment | null, task: StoredTask): number {
  return spec.limits.maxSteps ?? env?.limits(task).maxSteps ?? 16;
}

export function rolloutContext(
  g: GroupState,
  r: RolloutRow,
  env: Environment | null,
  versionAtStart: number,
  stopSignal: AbortSignal,
): RolloutContext {
  const { spec, task } = g;
  return {
    group: g,
    rollout: r,
    spec,
    task,
    env,
    purpose: g.row.purpose,
    limits: spec.limits,
    maxSteps: maxStepsOf(spec, env, task),
    // A task's own verifier is stored as it was loaded: parsed again, so one stored before a field existed gets its default.
    verifier: task.verifier ? verifierSpecSchema.parse(task.verifier) : (spec.verifier ?? { kind: 'env' }),
    seed: samplerSeed(g.row.purpose, task.id, r),
    versionAtStart,
    t0: performance.now(),
    stopSignal,
  };
}
