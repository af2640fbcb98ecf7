// The trainer's moving parts, free of Nest so tests, benches and the one-process main job build
// the very same thing: it consumes train_batch.created (batches/batch-intake.ts: in step order,
// exactly once per resume point), trains (training/batch-training.ts, training/train-step.ts),
// writes a checkpoint for every published version and publishes weights.published
// (checkpoints/weights-publisher.ts) and train_batch.trained. A resume restores the weights,
// AdamW's moments and the data position of the newest full checkpoint, so batches trained after
// it are trained again on exactly those weights: none is skipped and none counts twice.
import { TOPICS } from '@anvil/contracts';
import { BatchIntake } from './batches/batch-intake';
import type { DataPosition } from './checkpoints/checkpoint-store';
import { WeightsPublisher } from './checkpoints/weights-publisher';
import { PauseGate } from './lifecycle/pause-gate';
import { TrainerStoppedError, type TrainBatchEvent, type TrainerDeps, type TrainerOptions, type TrainerTotals } from './runtime-types';
import { BatchTraining } from './training/batch-training';
import { TrainerProgress } from './training/trainer-progress';

export {
  TrainerStoppedError,
  TrainerStoppingError,
  type BatchSource,
  type TrainBatchEvent,
  type TrainerOptions,
  type TrainerStepEvent,
} from './runtime-types';

export class TrainerRuntime {
  /** Totals for reports: idle and busy time since start. */
  readonly totals: TrainerTotals = { idleMs: 0, busyMs: 0, batches: 0, publishedVersions: 0, refusedBatches: 0 };
  private readonly progress: TrainerProgress;
  private readonly gate = new PauseGate();
  private readonly publisher: WeightsPublisher;
  private readonly training: BatchTraining;
  private readonly intake: BatchIntake;
  private stopped = false;
  private fatal: Error | null = null;
  private unsubscribe: ((timeoutMs?: number) => Promise<void>) | null = null;
  private doneWaiters: (() => void)[] = [];

  constructor(
    readonly options: TrainerOptions,
    private readonly deps: TrainerDeps,
  ) {
    const kl = options.settings.loss.klCoef ?? 0;
    if (kl > 0 && !deps.reference)
      throw new Error(`loss.klCoef is ${kl}: the trainer needs a reference model (the run's starting weights) to take the KL against`);
    this.progress = new TrainerProgress(options.initialVersion);
    this.publisher = new WeightsPublisher(deps, options, this.progress, this.totals);
    this.training = new BatchTraining(options, deps, this.progress, this.publisher, this.totals);
    this.intake = new BatchIntake({
      runId: options.runId,
      batches: deps.batches,
      logger: deps.logger,
      gate: this.gate,
      progress: this.progress,
      stopping: () => this.stopped,
      done: () => this.done,
      train: async (event) => {
        await this.training.train(event);
        this.afterBatch();
      },
    });
  }

  get currentVersion(): number {
    return this.progress.version;
  }

  get dataPosition(): DataPosition {
    return { ...this.progress.position };
  }

  get failure(): Error | null {
    return this.fatal;
  }

  /** True once maxBatches batches were trained (or the trainer stopped on a fatal error). */
  get done(): boolean {
    return this.fatal !== null || (this.options.maxBatches > 0 && this.progress.position.batchesTrained >= this.options.maxBatches);
  }

  /** Resolves when `done` becomes true. */
  whenDone(): Promise<void> {
    return this.done ? Promise.resolve() : new Promise((r) => this.doneWaiters.push(r));
  }

  /** Restores the newest full checkpoint (if any), repairs an unpublished version, subscribes. */
  async start(): Promise<void> {
    await this.publisher.resume();
    const sub = await this.deps.bus.subscribe({
      group: this.options.group,
      topics: [TOPICS.trainBatches],
      fromBeginning: true,
      maxAttempts: 3,
      handler: async (event) => {
        if (event.type !== 'train_batch.created') return;
        await this.intake.enqueue(event as TrainBatchEvent);
      },
    });
    this.unsubscribe = (timeoutMs) => sub.stop(timeoutMs === undefined ? {} : { timeoutMs });
    // Batches the log holds beyond the restored position (delivered before the crash).
    for (const e of await this.deps.batches.since(this.options.runId, this.progress.position.nextBatchStep)) await this.intake.enqueue(e);
  }

  /**
   * Holds training after the batch in progress (its version published), e.g. while an evaluation
   * runs pinned to the current version; batches keep queueing and are trained after resume().
   * Resolves once the trainer is idle.
   */
  pause(): Promise<void> {
    return this.gate.pause();
  }

  resume(): void {
    this.gate.resume();
  }

  /**
   * Stops consuming; the batch in progress finishes (its checkpoint and events are written) and
   * its delivery is committed; deliveries queued behind it are handed back untrained (their
   * handlers fail, so their offsets stay uncommitted). `timeoutMs` bounds the wait for in-flight
   * deliveries (the bus's default otherwise); past it they are left uncommitted, and the batch in
   * progress is still awaited. Idempotent.
   */
  async stop(timeoutMs?: number): Promise<void> {
    this.stopped = true;
    this.resume();
    const unsubscribe = this.unsubscribe;
    this.unsubscribe = null;
    await unsubscribe?.(timeoutMs);
    await this.intake.drained();
  }

  /** After each trained batch: stop on too many non-finite skips, wake whoever waits for the end. */
  private afterBatch(): void {
    const { nonFiniteSkips, version } = this.progress;
    if (nonFiniteSkips > this.options.maxNonFiniteSkips) {
      this.fail(
        new TrainerStoppedError(
          `${nonFiniteSkips} optimizer steps skipped for non-finite loss or gradients (limit ${this.options.maxNonFiniteSkips}): stopping with the last good weights (version ${version})`,
        ),
      );
    }
    if (this.done) this.doneWaiters.splice(0).forEach((r) => r());
  }

  private fail(err: Error): void {
    this.fatal = err;
    this.deps.logger.error('trainer stopped', { err: err.message });
    this.deps.onFatal?.(err);
    this.doneWaiters.splice(0).forEach((r) => r());
  }
}
