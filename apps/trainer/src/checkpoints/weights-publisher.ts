import { createEvent, type PublishedWeights } from '@anvil/contracts';
import type { TrainerProgress } from '../training/trainer-progress';
import type { TrainerDeps, TrainerOptions, TrainerTotals } from '../runtime-types';
import { weightsIn } from './adapter-checkpoint';

/**
 * Checkpoints and weights.published. A version's checkpoint is on disk (atomically) before
 * weights.published names it; a crash between the two is repaired at start by publishing the
 * newest version again (the inference-proxy is idempotent by version). A LoRA model's versions are
 * its merged weights, or with publish 'adapter' the adapter alone, published with the base it
 * applies to (the starting checkpoint directory and the fingerprint of its weights).
 */
export class WeightsPublisher {
  private lastPublished: number;
  private readonly format: 'merged' | 'adapter';

  constructor(
    private readonly deps: Pick<TrainerDeps, 'bus' | 'model' | 'store' | 'logger'>,
    private readonly options: Pick<TrainerOptions, 'runId' | 'publish' | 'baseCheckpointUri'>,
    private readonly progress: TrainerProgress,
    private readonly totals: TrainerTotals,
  ) {
    this.lastPublished = progress.version;
    this.format = options.publish ?? 'merged';
    if (this.format === 'adapter') {
      if (!deps.model.lora) throw new Error("publish 'adapter' needs a model with LoRA adapters (full fine-tuning publishes whole models)");
      if (!options.baseCheckpointUri)
        throw new Error("publish 'adapter' needs baseCheckpointUri: the starting checkpoint directory the adapters are applied to");
    }
  }

  /** What this trainer's versions hold. */
  private get weights(): PublishedWeights {
    return this.format === 'adapter' && this.deps.model.lora ? 'lora-adapter' : 'full';
  }

  /**
   * Restores the newest full checkpoint (if any): weights, AdamW's moments, step, position. New
   * weights after a resume get a number no earlier weights had; the resumed version is published
   * again, or under a fresh number when newer (lost) versions exist, so inference stops serving the
   * lost branch.
   */
  async resume(): Promise<void> {
    const { store, logger, model } = this.deps;
    await store.init();
    const latest = await store.latest((dir, err) => logger.warn('passing over a corrupt checkpoint', { dir, err: err.message }));
    if (!latest) return;
    const state = await store.restoreInto(model, latest.dir);
    this.progress.restore(state);
    const newest = Math.max(state.version, ...(await store.versions()));
    this.progress.version = newest;
    logger.info('trainer resumed', {
      dir: latest.dir,
      step: state.step,
      version: state.version,
      nextVersion: newest + 1,
      position: state.position,
    });
    // A resume point written in the other format (the publish setting changed) is published anew in this one.
    if (newest !== state.version || weightsIn(latest.dir) !== this.weights) {
      this.progress.version = newest + 1;
      await this.writeAndPublish(true);
    } else await this.publish(this.progress.version, latest.dir, state.sha256);
  }

  /** Writes the current weights (a full checkpoint: with AdamW and the position, a resume point) and publishes them. */
  async writeAndPublish(full: boolean): Promise<void> {
    const written = await this.deps.store.write(this.deps.model, this.progress.checkpointState(this.options.runId), full, {
      format: this.format,
      baseModelNameOrPath: this.options.baseCheckpointUri ?? null,
    });
    await this.publish(this.progress.version, written.dir, written.sha256);
  }

  private async publish(version: number, dir: string, sha256: string): Promise<void> {
    const parent = this.lastPublished === version ? null : this.lastPublished;
    const weights = this.weights;
    await this.deps.bus.publish(
      createEvent(
        'weights.published',
        {
          version,
          parentVersion: parent,
          step: this.progress.trainerStep,
          checkpointId: `${this.options.runId}-v${version}`,
          checkpointUri: dir,
          format: 'hf-safetensors',
          sha256,
          publishedAt: Date.now(),
          weights,
          ...(weights === 'lora-adapter'
            ? { base: { checkpointUri: this.options.baseCheckpointUri as string, fingerprint: await this.deps.model.baseFingerprint() } }
            : {}),
        },
        { key: String(version), producer: 'trainer' },
      ),
    );
    this.lastPublished = version;
    this.totals.publishedVersions++;
  }
}
