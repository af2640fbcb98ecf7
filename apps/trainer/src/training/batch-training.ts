import { createEvent, type EventPayloadAt } from '@anvil/contracts';
import { prefixTreeOf, type PrefixTree } from '@anvil/rl';
import type { WeightsPublisher } from '../checkpoints/weights-publisher';
import type { TrainBatchEvent, TrainerDeps, TrainerOptions, TrainerTotals } from '../runtime-types';
import { stalenessOf } from './staleness';
import { trainOnTree, type StepReport } from './train-step';
import type { TrainerProgress } from './trainer-progress';

/**
 * The train step loop's body: one batch read, trained (training/train-step.ts), the position
 * moved past it, a checkpoint and a published version when due, train_batch.trained published
 * and the step reported.
 */
export class BatchTraining {
  private idleSince = performance.now();

  constructor(
    private readonly options: TrainerOptions,
    private readonly deps: TrainerDeps,
    private readonly progress: TrainerProgress,
    private readonly publisher: WeightsPublisher,
    private readonly totals: TrainerTotals,
  ) {}

  async train(event: TrainBatchEvent): Promise<void> {
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
    const fromVersion = this.progress.version;
    const reports = await this.optimize(tree, fromVersion);
    const applied = this.advance(event, reports);
    const { published, checkpointed } = await this.checkpointIfDue(applied);
    await this.acknowledge(event, tree, reports, applied, checkpointed);
    const busyMs = performance.now() - started;
    this.totals.idleMs += idleMs;
    this.totals.busyMs += busyMs;
    this.totals.batches++;
    this.idleSince = performance.now();
    this.deps.onStep?.({
      batchId: payload.batchId,
      batchStep: payload.step,
      fromVersion,
      version: this.progress.version,
      trainerStep: this.progress.trainerStep,
      reports,
      ...stalenessOf(tree, fromVersion),
      idleMs,
      busyMs,
      published,
      checkpointed,
      batchStats: event.version === 2 ? (payload as EventPayloadAt<'train_batch.created', 2>).stats : null,
    });
  }

  /** A v1 batch inlines its samples; a v2 batch's tree comes from the claim-check blob. */
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

  /** The optimizer steps over the batch's mini-batches; a skipped step (non-finite values) is logged. */
  private optimize(tree: PrefixTree, fromVersion: number): Promise<StepReport[]> {
    const splitOf = this.deps.splitOf;
    return trainOnTree(this.deps.model, tree, this.options.settings, {
      currentVersion: fromVersion,
      stepsDone: this.progress.trainerStep,
      ...(this.deps.reference ? { reference: this.deps.reference } : {}),
      ...(splitOf ? { splitOf: (k: number) => splitOf(tree.samples[k]) } : {}),
    });
  }

  /** Counts the steps, moves the position past the batch (trained, or dropped when no step applied) and the version on. Returns the steps applied. */
  private advance(event: TrainBatchEvent, reports: StepReport[]): number {
    const payload = event.payload;
    const p = this.progress;
    const applied = reports.filter((r) => r.skipped === null).length;
    p.trainerStep += applied;
    p.nonFiniteSkips += reports.length - applied;
    for (const r of reports)
      if (r.skipped)
        this.deps.logger.warn('optimizer step skipped', {
          batchId: payload.batchId,
          reason: r.skipped,
          loss: r.loss,
          gradNorm: r.gradNorm,
        });
    p.position = {
      nextBatchStep: payload.step + 1,
      batchesTrained: p.position.batchesTrained + (applied > 0 ? 1 : 0),
      batchesDropped: p.position.batchesDropped + (applied > 0 ? 0 : 1),
      lastBatchId: payload.batchId,
    };
    if (applied > 0) p.version += 1;
    return applied;
  }

  /** A full checkpoint every checkpointEvery trained batches; a published version every publishEvery, at a full checkpoint and at the last batch. */
  private async checkpointIfDue(applied: number): Promise<{ published: boolean; checkpointed: boolean }> {
    const n = this.progress.position.batchesTrained;
    const max = this.options.maxBatches;
    const checkpointed = applied > 0 && n % this.options.checkpointEvery === 0;
    const published = applied > 0 && (n % this.options.publishEvery === 0 || checkpointed || (max > 0 && n >= max));
    if (published || checkpointed) await this.publisher.writeAndPublish(checkpointed);
    return { published, checkpointed };
  }

  /** train_batch.trained: the Data Pool's acknowledgement (retention, the adaptive window's wait). */
  private async acknowledge(event: TrainBatchEvent, tree: PrefixTree, reports: StepReport[], applied: number, checkpointed: boolean) {
    const payload = event.payload;
    await this.deps.bus.publish(
      createEvent(
        'train_batch.trained',
        {
          batchId: payload.batchId,
          batchStep: payload.step,
          runId: this.options.runId,
          trainerStep: this.progress.trainerStep,
          policyVersion: this.progress.version,
          groupIds: [...new Set(tree.samples.map((s) => s.groupId))],
          trajectoryIds: [...new Set(tree.samples.map((s) => s.trajectoryId))],
          outcome: applied > 0 ? 'trained' : 'skipped',
          reason: applied > 0 ? null : reports.map((r) => r.skipped).join('; '),
          checkpointed,
          trainedAt: Date.now(),
        },
        { key: payload.batchId, producer: 'trainer' },
      ),
    );
  }
}
