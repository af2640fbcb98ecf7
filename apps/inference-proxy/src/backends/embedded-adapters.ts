import type { Model } from '@anvil/engine';

/** A LoRA adapter version: the adapter's directory and the base it applies to. */
export interface AdapterVersion {
  adapterDir: string;
  base: { dir: string; fingerprint: string };
}

/**
 * Builds the weights of a LoRA adapter version for the embedded engine: the base is loaded once
 * (and again only when a version names another base), checked against the fingerprint the trainer
 * published; each version is applied to a fresh copy of it (loadAdapter refuses an adapter recorded
 * for other base weights) and merged, so the generator serves a plain model at the base's speed,
 * swapped in like any checkpoint. Nothing the generator serves changes until the merged model is
 * whole: a refused adapter or base leaves the active weights as they were.
 */
export class EmbeddedAdapters {
  private base: { dir: string; fingerprint: string; model: Model } | null = null;

  /** The merged model of `v` (the caller takes it over). */
  async merged(v: AdapterVersion): Promise<Model> {
    const base = await this.baseOf(v.base);
    const { Model } = await import('@anvil/engine');
    const copy = Model.create(base.config, { backend: base.backend });
    try {
      await base.syncToHost();
      copy.tensors.forEach((t, i) => t.data.set(base.tensors[i].data));
      await copy.syncToDevice();
      await copy.loadAdapter(v.adapterDir);
      await copy.mergeLora();
      return copy;
    } catch (e) {
      copy.dispose();
      throw e;
    }
  }

  private async baseOf(b: AdapterVersion['base']): Promise<Model> {
    if (this.base && this.base.dir === b.dir && this.base.fingerprint === b.fingerprint) return this.base.model;
    const { Model } = await import('@anvil/engine');
    const model = await Model.load(b.dir);
    try {
      const actual = await model.baseFingerprint();
      if (actual !== b.fingerprint)
        throw new Error(
          `the base ${b.dir} holds other weights than the adapter was trained on (fingerprint ${actual.slice(0, 19)}..., published ${b.fingerprint.slice(0, 19)}...)`,
        );
      // Kept only to be copied: a rank-1 adapter (B = 0, changing nothing) frees the gradient arena every engine model allocates.
      await model.enableLora({ rank: 1, alpha: 1, targets: ['q_proj'] });
    } catch (e) {
      model.dispose();
      throw e;
    }
    this.base?.model.dispose();
    this.base = { dir: b.dir, fingerprint: b.fingerprint, model };
    return model;
  }

  close(): void {
    this.base?.model.dispose();
    this.base = null;
  }
}
