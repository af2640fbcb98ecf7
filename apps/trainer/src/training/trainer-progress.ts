import type { DataPosition, TrainerState } from '../checkpoints/checkpoint-store';

/**
 * Where the trainer is: the policy version of its weights, the optimizer steps applied, its
 * position in the Data Pool's batch sequence and the steps skipped for non-finite values. What a
 * checkpoint records and a resume restores; shared by the trainer's rooms.
 */
export class TrainerProgress {
  version: number;
  trainerStep = 0;
  position: DataPosition = { nextBatchStep: 0, batchesTrained: 0, batchesDropped: 0, lastBatchId: null };
  nonFiniteSkips = 0;

  constructor(initialVersion: number) {
    this.version = initialVersion;
  }

  /** A restored checkpoint's step, position and skips (its version is decided by the resume). */
  restore(state: TrainerState): void {
    this.trainerStep = state.step;
    this.position = { ...state.position };
    this.nonFiniteSkips = state.nonFiniteSkips;
  }

  /** What a checkpoint writes of the trainer (the store adds format, digest and time). */
  checkpointState(runId: string): Omit<TrainerState, 'format' | 'sha256' | 'writtenAt'> {
    return { runId, step: this.trainerStep, version: this.version, position: { ...this.position }, nonFiniteSkips: this.nonFiniteSkips };
  }
}
