/**
 * The port between the one run driver (driver.ts) and the services it drives. Two adapters
 * implement it: in-process/ (all five services in this process, on one in-process bus and one
 * embedded database) and distributed/ (each service its own process, over its internal HTTP API
 * and Kafka). The driver never knows which one it has.
 */
import type { EvaluationCompletedV1 } from '@anvil/contracts';
import type { StalenessSnapshot } from '@anvil/rl';
import type { TrainerStepEvent } from '@anvil/trainer';
import type { TaskSetLoader } from './task-set';

/** A rollout that ended, as the driver needs it: why it ended, its reward, and the error when it failed. */
export interface CompletedRollout {
  rolloutId: string;
  groupId: string;
  purpose: 'train' | 'eval';
  finishReason: string;
  outcomeReward: number | null;
  /** The failure in full (for a black-box agent: its exit status and the tail of its stderr). */
  error: string | null;
}

/** The rollout-manager's state: what runs, what waits, and what holds admission. */
export interface RolloutState {
  policyVersion: number;
  queuedGroups: number;
  running: number;
  evaluationsRunning: number;
  staleness: StalenessSnapshot;
  /** Seconds the head of the train queue waited so far, by what held it. */
  admissionBlockedSeconds: { capacity: number; version: number; slots: number };
}

export interface TrainerState {
  version: number;
  /** The step budget is spent (or the trainer stopped). */
  done: boolean;
  /** Why the trainer stopped, when it failed. */
  failure: string | null;
  /** Time spent training, checkpointing and publishing so far (ms). */
  busyMs: number;
}

export interface EvaluationRequest {
  taskSetId: string;
  version: number;
  samplesPerTask: number;
  temperature: number;
  evalId: string;
}

export interface RunServices {
  /** 'in-process' or 'distributed' (the summary's deployment). */
  readonly deployment: string;
  /** The run's directory (database, logs) and where the trainer writes published versions. */
  readonly runDir: string;
  readonly checkpointsDir: string;
  /** Loads task sets into the rollout-manager. */
  readonly tasks: TaskSetLoader;
  /** Queues one group per train task of a set (a pass over the train split), in a seeded order when shuffleSeed is given. */
  submit(pass: { taskSetId: string; shuffleSeed?: number }): Promise<void>;
  rolloutState(): Promise<RolloutState>;
  /** Runs held-out tasks pinned to `version` (the caller holds the trainer there); resolves when the last is scored. */
  evaluate(req: EvaluationRequest): Promise<EvaluationCompletedV1>;
  /** Lets the trainer take train batches (it takes none before). */
  startTraining(): Promise<void>;
  /** Holds the trainer after the batch in progress; resolves with the version it holds. */
  pauseTraining(): Promise<number>;
  resumeTraining(): Promise<void>;
  trainerState(): Promise<TrainerState>;
  /** Every train step as the trainer reports it, with when it ended (epoch ms). */
  onStep(fn: (e: TrainerStepEvent, atMs: number) => void): void;
  /** Every rollout that ends, train and eval. */
  onRolloutCompleted(fn: (r: CompletedRollout) => void): void;
  /** Resolves once every step the trainer has taken so far has reached onStep. */
  flushSteps(): Promise<void>;
  /** Stops starting rollouts and ends the running ones (before close; the final evaluation is over by then). */
  stopRollouts(): Promise<void>;
  close(): Promise<void>;
}
