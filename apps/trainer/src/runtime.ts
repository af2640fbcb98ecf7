// The trainer's moving parts, free of Nest so tests, benches and the one-process main job build
// the very same thing: it consumes train_batch.created, trains (training/train-step.ts), writes a
// checkpoint for every published version (checkpoints/checkpoint-store.ts) and publishes
// weights.published and train_batch.trained.
//
// Data position. The Data Pool numbers batches 0, 1, 2, ... (train_batch.created.step). The
// trainer trains them in that order, exactly once per resume point: a batch below its position
// was already trained (a redelivery: skipped), a batch above it means some were not delivered
// to this member (a rebalance or a resume from an older checkpoint): they are fetched from the
// BatchSource first. A resume restores the weights, AdamW's moments and the position of the
// newest full checkpoint, so batches trained after it are trained again on exactly those weights
// — none is skipped and none counts twice in the weights. Filtered and stale-dropped work never
// gets a batch number, so it cannot shift the position.
//
// Publishing. A version's checkpoint is on disk (atomically) before weights.published names it;
// a crash between the two is repaired at start by publishing the newest version again (the
// inference-proxy is idempotent by version).
import { createEvent, type EventEnvelope, type EventPayloadAt } from '@anvil/contracts';
import type { Model } from '@anvil/engine';
import type { MessageBus } from '@anvil/messaging';
import type { Logger } from '@anvil/observability';
import { prefixTreeOf, type PrefixTree } from '@anvil/rl';
import { TOPICS } from '@anvil/contracts';
import { CheckpointStore, type DataPosition, type TrainerState } from './checkpoints/checkpoint-store';
import { trainOnTree, type StepReport, type TrainSettings } from './training/train-step';

export type TrainBatchEvent = EventEnvelope<'train_batch.created'>;

/** Where batches' tokens come from: the Data Pool's claim-check reader (v2) and its batch log (catch-up). */
export interface BatchSource {
  /** The v2 batch's prefix tree, checksum verified (throws on a mismatch). */
  tree(event: TrainBatchEvent): Promise<PrefixTree>;
  /** This run's batches with step >= fromStep, in step order (may be empty when the log was pruned). */
  since(runId: string | null, fromStep: number): Promise<TrainBatchEvent[]>;
}

export interface TrainerOptions {
  runId: string;
  settings: TrainSettings;
  /** Publish a new policy version every this many batches (1 = after every batch). */
  publishEvery: number;
  /** Write a full checkpoint (weights + AdamW + position: a resume point) every this many batches. */
  checkpointEvery: number;
  /** Stop the trainer when this many steps were skipped for non-finite values. */
  maxNonFiniteSkips: number;
  /** Policy version of the starting weights (what the inference-proxy serves before any publish). */
  initialVersion: number;
  /** Stop consuming after this many trained batches (0 = no limit): the main job's fixed budget. */
  maxBatches: number;
  /** Consumer group (one per trainer role). */
  group: string;
}

export interface TrainerStepEvent {
  batchId: string;
  batchStep: number;
  /** Version before / after this batch. */
  fromVersion: number;
  version: number;
  trainerStep: number;
  reports: StepReport[];
  /** Staleness of the batch's output tokens against fromVersion. */
  staleness: { mean: number; max: number; shareOlderThan1: number; tokens: number };
  /** Output tokens per lag (index = versions behind fromVersion). */
  stalenessHistogram: number[];
  /** Time the trainer waited for this batch since it finished the previous one (ms). */
  idleMs: number;
  /** Time spent training this batch, checkpointing and publishing (ms). */
  busyMs: number;
  published: boolean;
  checkpointed: boolean;
  /** The batch's Data Pool statistics (v2), when it had them. */
  batchStats: EventPayloadAt<'train_batch.created', 2>['stats'] | null;
}

export class TrainerStoppedError extends Error {
  override name = 'TrainerStoppedError';
}

/** A delivery that arrived while the trainer was stopping: not trained, handed back (its offset stays uncommitted). */
export class TrainerStoppingError extends Error {
  override name = 'TrainerStoppingError';
}

interface Deps {
  bus: MessageBus;
  model: Model;
  store: CheckpointStore;
  batches: BatchSource;
  logger: Logger;
  onStep?: (e: TrainerStepEvent) => void;
  onFatal?: (err: Error) => void;
  /** The mismatch split a sample belongs to (context-management mode, agent kind); default 'all'. */
  splitOf?: (sample: PrefixTree['samples'][number]) => string;
  /** The fixed reference policy of the loss's KL penalty (the run's starting weights, never trained); required when loss.klCoef > 0. */
  reference?: Model;
}

export class TrainerRuntime {
  private version: number;
  private trainerStep = 0;
  private position: DataPosition = { nextBatchStep: 0, batchesTrained: 0, batchesDropped: 0, lastBatchId: null };
  private nonFiniteSkips = 0;
  private lastPublished: number;
  private idleSince = performance.now();
  private busy: Promise<void> = Promise.resolve();
  private stopped = false;
  private fatal: Error | null = null;
  private unsubscribe: ((timeoutMs?: number) => Promise<void>) | null = null;
  private doneWaiters: (() => void)[] = [];
  private pauseGate: { promise: Promise<void>; release: () => void } | null = null;
  /** The batch being trained right now (pause() waits for it, not for the queue behind it). */
  private training: Promise<void> | null = null;
  /** Totals for reports: idle and busy time since start. */
  readonly totals = { idleMs: 0, busyMs: 0, batches: 0, publishedVersions: 0, refusedBatches: 0 };

  constructor(
    readonly options: TrainerOptions,
    private readonly deps: Deps,
  ) {
    const kl = options.settings.loss.klCoef ?? 0;
    if (kl > 0 && !deps.reference)
      throw new Error(`loss.klCoef is ${kl}: the trainer needs a reference model (the run's starting weights) to take the KL against`);
    this.version = options.initialVersion;
    this.lastPublished = options.initialVersion;
  }

  get currentVersion(): number {
    return this.version;
  }

  get dataPosition(): DataPosition {
    return { ...this.position };
  }

  get failure(): Error | null {
    return this.fatal;
  }

  /** True once maxBatches batches were trained (or the trainer stopped on a fatal error). */
  get done(): boolean {
    return this.fatal !== null || (this.options.maxBatches > 0 && this.position.batchesTrained >= this.options.maxBatches);
  }

  /** Resolves when `done` becomes true. */
  whenDone(): Promise<void> {
    return this.done ? Promise.resolve() : new Promise((r) => this.doneWaiters.push(r));
  }

  /** Restores the newest full checkpoint (if any), repairs an unpublished version, subscribes. */
  async start(): Promise<void> {
    const { store, logger, model } = this.deps;
    await store.init();
    const latest = await store.latest((dir, err) => logger.warn('passing over a corrupt checkpoint', { dir, err: err.message }));
    if (latest) {
      const state = await store.restoreInto(model, latest.dir);
      this.trainerStep = state.step;
      this.position = { ...state.position };
      this.nonFiniteSkips = state.nonFiniteSkips;
      // New weights after a resume get a number no earlier weights had.
      const newest = Math.max(state.version, ...(await store.versions()));
      this.version = newest;
      logger.info('trainer resumed', {
        dir: latest.dir,
        step: state.step,
        version: state.version,
        nextVersion: newest + 1,
        position: state.position,
      });
      if (newest !== state.version) {
        // The resumed weights are state.version's; publish them under a fresh number so inference
        // stops serving the lost branch.
        this.version = newest + 1;
        await this.writeAndPublish(true);
      } else await this.publish(this.version, latest.dir, state.sha256);
    }
    const sub = await this.deps.bus.subscribe({
      group: this.options.group,
      topics: [TOPICS.trainBatches],
      fromBeginning: true,
      maxAttempts: 3,
      handler: async (event) => {
        if (event.type !== 'train_batch.created') return;
        await this.enqueue(event as TrainBatchEvent);
      },
    });
    this.unsubscribe = (timeoutMs) => sub.stop(timeoutMs === undefined ? {} : { timeoutMs });
    // Batches the log holds beyond the restored position (delivered before the crash).
    for (const e of await this.deps.batches.since(this.runIdOf(), this.position.nextBatchStep)) await this.enqueue(e);
  }

  /**
   * Holds training after the batch in progress (its version published), e.g. while an evaluation
   * runs pinned to the current version; batches keep queueing and are trained after resume().
   * Resolves once the trainer is idle.
   */
  async pause(): Promise<void> {
    if (!this.pauseGate) {
      let release!: () => void;
      const promise = new Promise<void>((r) => (release = r));
      this.pauseGate = { promise, release };
    }
    while (this.training) await this.training.catch(() => undefined);
  }

  resume(): void {
    const gate = this.pauseGate;
    this.pauseGate = null;
    gate?.release();
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
    await this.busy.catch(() => undefined);
  }

  private runIdOf(): string | null {
    return this.options.runId;
  }

  /** Serialises batches: one at a time, in arrival order, each checked against the position. */
  private enqueue(event: TrainBatchEvent): Promise<void> {
    const next = this.busy.then(() => this.handle(event));
    this.busy = next.catch(() => undefined);
    return next;
  }

  private async handle(event: TrainBatchEvent): Promise<void> {
    while (this.pauseGate && !this.stopped) await this.pauseGate.promise;
    if (this.stopped)
      throw new TrainerStoppingError(`trainer stopping: batch ${event.payload.batchId} (step ${event.payload.step}) handed back untrained`);
    if (this.done) return;
    const runId = (event.payload as { runId?: string | null }).runId;
    if (runId !== undefined && runId !== null && runId !== this.options.runId) {
      // Another run's batch (runs may share a topic): not this trainer's, and its step is not this run's position.
      this.deps.logger.debug("another run's batch: not trained here", {
        batchId: event.payload.batchId,
        runId,
        trainerRunId: this.options.runId,
      });
      return;
    }
    const step = event.payload.step;
    if (step < this.position.nextBatchStep) {
      this.deps.logger.debug('batch already trained (redelivery)', {
        batchId: event.payload.batchId,
        step,
        position: this.position.nextBatchStep,
      });
      return;
    }
    if (step > this.position.nextBatchStep) {
      const missing = (await this.deps.batches.since(this.runIdOf(), this.position.nextBatchStep)).filter((e) => e.payload.step < step);
      for (const e of missing) await this.train(e);
      if (step > this.position.nextBatchStep) {
        this.deps.logger.warn('batches missing from the log: continuing past them', { from: this.position.nextBatchStep, to: step - 1 });
        this.position.batchesDropped += step - this.position.nextBatchStep;
        this.position.nextBatchStep = step;
      }
    }
    await this.train(event);
  }

  private treeOf(event: TrainBatchEvent): Promise<PrefixTree> {
    if (event.version === 1) {
      const p = event.payload as unknown as EventPayloadAt<'train_batch.created', 1>;
      return Promise.resolve(
        prefixTreeOf(
          p.samples.map((s) => ({
            sampleId: s.sampleId,
            trajectoryId: s.trajectoryId,
            groupId: s.groupId,
            advantage: s.advantage,
            lossWeight: s.lossWeight,
            promptIds: s.promptIds,
            outputIds: s.outputIds,
            behaviourLogp: s.behaviourLogprobs,
            versions: s.outputVersions,
          })),
        ),
      );
    }
    return this.deps.batches.tree(event);
  }

  private async train(event: TrainBatchEvent): Promise<void> {
    if (this.stopped)
      throw new TrainerStoppingError(`trainer stopping: batch ${event.payload.batchId} (step ${event.payload.step}) handed back untrained`);
    if (this.done || event.payload.step < this.position.nextBatchStep) return;
    const run = this.trainOne(event);
    this.training = run;
    try {
      await run;
    } finally {
      if (this.training === run) this.training = null;
    }
  }

  private async trainOne(event: TrainBatchEvent): Promise<void> {
    const started = performance.now();
    const idleMs = started - this.idleSince;
    const payload = event.payload;
    let tree: PrefixTree;
    try {
      tree = await this.treeOf(event);
    } catch (err) {
      // A corrupt or missing blob: refused, not trained; the Data Pool re-cuts it under the same step.
      this.totals.refusedBatches++;
      this.deps.logger.error('train batch refused', { batchId: payload.batchId, step: payload.step, err: (err as Error).message });
      return;
    }
    const fromVersion = this.version;
    const splitOf = this.deps.splitOf;
    const reports = await trainOnTree(this.deps.model, tree, this.options.settings, {
      currentVersion: fromVersion,
      stepsDone: this.trainerStep,
      ...(this.deps.reference ? { reference: this.deps.reference } : {}),
      ...(splitOf ? { splitOf: (k: number) => splitOf(tree.samples[k]) } : {}),
    });
    const applied = reports.filter((r) => r.skipped === null).length;
    const skipped = reports.length - applied;
    this.trainerStep += applied;
    this.nonFiniteSkips += skipped;
    for (const r of reports)
      if (r.skipped)
        this.deps.logger.warn('optimizer step skipped', {
          batchId: payload.batchId,
          reason: r.skipped,
          loss: r.loss,
          gradNorm: r.gradNorm,
        });
    this.position = {
      nextBatchStep: payload.step + 1,
      batchesTrained: this.position.batchesTrained + (applied > 0 ? 1 : 0),
      batchesDropped: this.position.batchesDropped + (applied > 0 ? 0 : 1),
      lastBatchId: payload.batchId,
    };
    if (applied > 0) this.version += 1;
    const n = this.position.batchesTrained;
    const full = applied > 0 && n % this.options.checkpointEvery === 0;
    const publish =
      applied > 0 && (n % this.options.publishEvery === 0 || full || (this.options.maxBatches > 0 && n >= this.options.maxBatches));
    if (publish || full) await this.writeAndPublish(full);
    await this.deps.bus.publish(
      createEvent(
        'train_batch.trained',
        {
          batchId: payload.batchId,
          batchStep: payload.step,
          runId: this.options.runId,
          trainerStep: this.trainerStep,
          policyVersion: this.version,
          groupIds: [...new Set(tree.samples.map((s) => s.groupId))],
          trajectoryIds: [...new Set(tree.samples.map((s) => s.trajectoryId))],
          outcome: applied > 0 ? 'trained' : 'skipped',
          reason: applied > 0 ? null : reports.map((r) => r.skipped).join('; '),
          checkpointed: full,
          trainedAt: Date.now(),
        },
        { key: payload.batchId, producer: 'trainer' },
      ),
    );
    const busyMs = performance.now() - started;
    this.totals.idleMs += idleMs;
    this.totals.busyMs += busyMs;
    this.totals.batches++;
    this.idleSince = performance.now();
    this.deps.onStep?.({
      batchId: payload.batchId,
      batchStep: payload.step,
      fromVersion,
      version: this.version,
      trainerStep: this.trainerStep,
      reports,
      ...stalenessOf(tree, fromVersion),
      idleMs,
      busyMs,
      published: publish,
      checkpointed: full,
      batchStats: event.version === 2 ? (payload as EventPayloadAt<'train_batch.created', 2>).stats : null,
    });
    if (this.nonFiniteSkips > this.options.maxNonFiniteSkips) {
      this.fail(
        new TrainerStoppedError(
          `${this.nonFiniteSkips} optimizer steps skipped for non-finite loss or gradients (limit ${this.options.maxNonFiniteSkips}): stopping with the last good weights (version ${this.version})`,
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

  private async writeAndPublish(full: boolean): Promise<void> {
    const state: Omit<TrainerState, 'format' | 'sha256' | 'writtenAt'> = {
      runId: this.options.runId,
      step: this.trainerStep,
      version: this.version,
      position: { ...this.position },
      nonFiniteSkips: this.nonFiniteSkips,
    };
    const written = await this.deps.store.write(this.deps.model, state, full);
    await this.publish(this.version, written.dir, written.sha256);
  }

  private async publish(version: number, dir: string, sha256: string): Promise<void> {
    const parent = this.lastPublished === version ? null : this.lastPublished;
    await this.deps.bus.publish(
      createEvent(
        'weights.published',
        {
          version,
          parentVersion: parent,
          step: this.trainerStep,
          checkpointId: `${this.options.runId}-v${version}`,
          checkpointUri: dir,
          format: 'hf-safetensors',
          sha256,
          publishedAt: Date.now(),
        },
        { key: String(version), producer: 'trainer' },
      ),
    );
    this.lastPublished = version;
    this.totals.publishedVersions++;
  }
}

/** Versions behind `version` of the batch's output tokens (each sample's tokens, as trained). */
function stalenessOf(tree: PrefixTree, version: number) {
  let sum = 0,
    max = 0,
    old = 0,
    n = 0;
  const histogram: number[] = [];
  for (const s of tree.samples)
    for (const node of s.outputNodes) {
      const lag = Math.max(0, version - tree.versions[node]);
      sum += lag;
      max = Math.max(max, lag);
      if (lag > 1) old++;
      n++;
      histogram[lag] = (histogram[lag] ?? 0) + 1;
    }
  return {
    staleness: { mean: n ? sum / n : 0, max, shareOlderThan1: n ? old / n : 0, tokens: n },
    stalenessHistogram: Array.from(histogram, (v) => v ?? 0),
  };
}
