import type { Environment } from '../environments/types';
import type { GroupRow, RolloutRow } from '../state-store';
import type { StoredTask } from '../tasks/jsonl';
import type { TaskSetSpec } from '../tasks/task-set';

/** One rollout group as the runtime holds it in memory (its rows are in rm_groups / rm_rollouts). */
export interface GroupState {
  row: GroupRow;
  task: StoredTask;
  spec: TaskSetSpec;
  members: RolloutRow[];
  /** Members not completed yet. */
  pending: number;
  submittedAt: number;
  evalVersion?: number;
  /** An evaluation's sampling temperature, when it differs from the task set's. */
  evalTemperature?: number;
  /** The group's state writes, chained so they land in the order they were made. */
  writes?: Promise<unknown>;
}

/** A loaded task set: its declaration and its environment (null: JSONL tasks with their own verifiers). */
export interface LoadedTaskSet {
  spec: TaskSetSpec;
  env: Environment | null;
}
