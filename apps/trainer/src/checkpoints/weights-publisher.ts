import { createEvent } from '@anvil/contracts';
import type { TrainerProgress } from '../training/trainer-progress';
import type { TrainerDeps, TrainerTotals } from '../runtime-types';

/**
 * Checkpoints and weights.published. A version's checkpoint is on disk (atomically) before
 * weights.published names it; a crash between the two is repaired at start by publishing the
 * newest version again (the inference-proxy is idempotent by version).
 */
export class WeightsPublisher {
  private lastPublished: number;

  constructor(
    private readonly deps: Pick<TrainerDeps, 'bus' | 'model' | 'store' | 'logger'>,
    private readonly runId: string,
    private readonly progress: TrainerProgress,
    private readonly totals: TrainerTotals,
  ) {
    this.lastPublished = progress.version;
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
    if (newest !== state.version) {
      this.progress.version = newest + 1;
      await this.writeAndPublish(true);
    } else await this.publish(this.progress.version, latest.dir, state.sha256);
  }

  /** Writes the current weights (a full checkpoint: with AdamW and the position, a resume point) and publishes them. */
  async writeAndPublish(full: boolean): Promise<void> {
    const written = await this.deps.store.write(this.deps.model, this.progress.checkpointState(this.runId), full);
    await this.publish(this.progress.version, written.dir, written.sha256);
  }

  private async publish(version: number, dir: string, sha256: string): Promise<void> {
    const parent = this.lastPublished === version ? null : this.lastPublished;
    await this.deps.bus.publish(
      createEvent(
        'weights.published',
        {
          version,
          parentVersion: parent,
          step: this.progress.trainerStep,
          checkpointId: `${this.runId}-v${version}`,
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
