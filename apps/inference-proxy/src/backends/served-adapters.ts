import { BackendRequestError, type LoadWeightsRequest } from './backend';

/** What an external engine offers for weight loads: a whole checkpoint, and runtime LoRA adapters. */
export interface AdapterOps {
  loadFull(dir: string): Promise<void>;
  loadAdapter(name: string, path: string): Promise<void>;
  unloadAdapter(name: string): Promise<void>;
}

/**
 * How an external engine (vLLM, SGLang) serves LoRA adapter versions: the base checkpoint is
 * loaded as whole weights (again only when a version names another base, or after whole weights
 * were loaded over it), each version's adapter is loaded under its own name (`anvil-v<version>`)
 * and requests name it, and the adapters of earlier versions are unloaded so they hold no slot.
 * The engine applies the adapter unmerged; it cannot check the base's fingerprint, so the base is
 * the directory the trainer named (the proxy checked the adapter's own checksum).
 */
export class ServedAdapters {
  /** The adapter requests name now; null: the loaded weights themselves. */
  current: string | null = null;
  /** The whole checkpoint the engine was last told to load (null: whatever it was started with). */
  private weights: string | null = null;
  /** Adapters this proxy loaded and has not unloaded yet. */
  private readonly loaded = new Set<string>();

  constructor(
    private readonly backendId: string,
    private readonly ops: AdapterOps,
  ) {}

  async load(req: LoadWeightsRequest): Promise<void> {
    if (req.weights !== 'lora-adapter') {
      await this.ops.loadFull(req.checkpointUri);
      this.weights = req.checkpointUri;
      this.current = null;
    } else {
      if (!req.base)
        throw new BackendRequestError(this.backendId, 400, `version ${req.version}: a LoRA adapter without the base it applies to`);
      if (this.weights !== req.base.checkpointUri) {
        this.current = null;
        await this.ops.loadFull(req.base.checkpointUri);
        this.weights = req.base.checkpointUri;
      }
      const name = `anvil-v${req.version}`;
      if (!this.loaded.has(name)) {
        try {
          await this.ops.loadAdapter(name, req.checkpointUri);
        } catch (err) {
          // The engine kept it from an earlier try whose answer was lost: it is loaded.
          if (!(err instanceof BackendRequestError && /already/i.test(err.message))) throw err;
        }
        this.loaded.add(name);
      }
      this.current = name;
    }
    for (const old of [...this.loaded]) {
      if (old === this.current) continue;
      await this.ops.unloadAdapter(old);
      this.loaded.delete(old);
    }
  }
}
