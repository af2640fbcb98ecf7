import type { Logger } from '@anvil/observability';
import type { PauseGate } from '../lifecycle/pause-gate';
import { TrainerStoppingError, type BatchSource, type TrainBatchEvent } from '../runtime-types';
import type { TrainerProgress } from '../training/trainer-progress';

interface IntakeDeps {
  runId: string;
  batches: BatchSource;
  logger: Logger;
  gate: PauseGate;
  progress: TrainerProgress;
  stopping: () => boolean;
  done: () => boolean;
  /** Trains one batch that is next in the sequence. */
  train: (event: TrainBatchEvent) => Promise<void>;
}

/**
 * Batch intake: deliveries (the bus, and the batch log at start) are serialised, one at a time in
 * arrival order, and each is checked against the data position. The Data Pool numbers batches 0,
 * 1, 2, ... (train_batch.created.step) and the trainer trains them in that order, exactly once per
 * resume point: a batch below the position was already trained (a redelivery: skipped), a batch
 * above it means some were not delivered to this member (a rebalance or a resume from an older
 * checkpoint): they are fetched from the BatchSource first. Filtered and stale-dropped work never
 * gets a batch number, so it cannot shift the position.
 */
export class BatchIntake {
  private busy: Promise<void> = Promise.resolve();

  constructor(private readonly deps: IntakeDeps) {}

  /** Queues a delivery behind the ones before it; resolves when it was handled (its handler's outcome). */
  enqueue(event: TrainBatchEvent): Promise<void> {
    const next = this.busy.then(() => this.handle(event));
    this.busy = next.catch(() => undefined);
    return next;
  }

  /** Resolves when every queued delivery was handled. */
  drained(): Promise<void> {
    return this.busy.catch(() => undefined);
  }

  private async handle(event: TrainBatchEvent): Promise<void> {
    const { gate, logger, progress } = this.deps;
    await gate.passed(this.deps.stopping);
    if (this.deps.stopping()) throw handedBack(event);
    if (this.deps.done()) return;
    const runId = (event.payload as { runId?: string | null }).runId;
    if (runId !== undefined && runId !== null && runId !== this.deps.runId) {
      // Another run's batch (runs may share a topic): not this trainer's, and its step is not this run's position.
      logger.debug("another run's batch: not trained here", { batchId: event.payload.batchId, runId, trainerRunId: this.deps.runId });
      return;
    }
    const step = event.payload.step;
    if (step < progress.position.nextBatchStep) {
      logger.debug('batch already trained (redelivery)', {
        batchId: event.payload.batchId,
        step,
        position: progress.position.nextBatchStep,
      });
      return;
    }
    if (step > progress.position.nextBatchStep) await this.catchUp(step);
    await this.trainNext(event);
  }

  /** Trains the batches the log holds between the position and `step`; what it lacks is counted dropped and passed over. */
  private async catchUp(step: number): Promise<void> {
    const { batches, logger, progress } = this.deps;
    const missing = (await batches.since(this.deps.runId, progress.position.nextBatchStep)).filter((e) => e.payload.step < step);
    for (const e of missing) await this.trainNext(e);
    if (step > progress.position.nextBatchStep) {
      logger.warn('batches missing from the log: continuing past them', { from: progress.position.nextBatchStep, to: step - 1 });
      progress.position.batchesDropped += step - progress.position.nextBatchStep;
      progress.position.nextBatchStep = step;
    }
  }

  private async trainNext(event: TrainBatchEvent): Promise<void> {
    if (this.deps.stopping()) throw handedBack(event);
    if (this.deps.done() || event.payload.step < this.deps.progress.position.nextBatchStep) return;
    await this.deps.gate.track(this.deps.train(event));
  }
}

const handedBack = (event: TrainBatchEvent) =>
  new TrainerStoppingError(`trainer stopping: batch ${event.payload.batchId} (step ${event.payload.step}) handed back untrained`);
