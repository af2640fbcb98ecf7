import type { Model } from '@anvil/engine';

/** A LoRA adapter version: the adapter's directory and the base it applies to. */
export interface AdapterVersion {
  adapterDir: string;
  base: { dir: string; fingerprint: string };
}

/**
 * The weights of a LoRA adapter version for the embedded engine: a fresh copy of the base, read
 * from its directory, with the adapter loaded and merged, so the generator serves a plain model at
 * the base's speed, swapped in like any checkpoint. Each version is applied to the base, never on
 * top of the previous adapter. The base is read again per version rather than kept and copied in
 * memory: the engine makes a model only by loading one or by random initialisation (5.6 s on the
 * SmolLM2-135M shape against 1.0 s to load it from the page cache), and no second copy stays
 * resident. Refused, with the generator's weights unchanged: a base whose weights are not the
 * published fingerprint's, an adapter recorded for other base weights, a damaged adapter.
 */
export async function mergedAdapterModel(v: AdapterVersion): Promise<Model> {
  const { Model, readAdapter } = await import('@anvil/engine');
  const model = await Model.load(v.base.dir);
  try {
    // One fingerprint of the base: when the adapter records the published one, loadAdapter's own
    // check (the base's weights against what the adapter records) covers both.
    const recorded = (await readAdapter(v.adapterDir, model.config)).baseFingerprint;
    if (recorded !== v.base.fingerprint) {
      const actual = await model.baseFingerprint();
      if (actual !== v.base.fingerprint)
        throw new Error(
          `the base ${v.base.dir} holds other weights than the adapter was trained on (fingerprint ${actual.slice(0, 19)}..., published ${v.base.fingerprint.slice(0, 19)}...)`,
        );
    }
    await model.loadAdapter(v.adapterDir);
    await model.mergeLora();
    return model;
  } catch (e) {
    model.dispose();
    throw e;
  }
}
