// The typed model API over the native engine: create / load / save, forward over a packed tree,
// backward with caller-computed coefficients, gradient clipping, AdamW.
import { existsSync, promises as fsp } from 'node:fs';
import { basename, join } from 'node:path';
import { ModelConfig, ModelConfigInput, normalizeConfig, parseHfConfig, ropeInvFreq, tinyConfig, toHfConfig } from './config';
import { loadBackend, loadEngine, type Backend } from './loader';
import { LoraConfig, LoraOptions, normalizeLoraOptions } from './lora';
import { LoraAdapterError, readAdapter, weightsFingerprint, writeAdapter } from './lora-adapter';
import type { NativeHandle, NativeModel, NativeTensorLayout } from './native';
import { parseSafetensors, SafetensorsError, toFloat32, writeSafetensors } from './safetensors';

/** A packed prefix tree: node i has token tokens[i] and parent parents[i] (-1 for a root, else < i). */
export interface PackInput {
  tokens: Int32Array;
  parents: Int32Array;
}

export interface ForwardOptions {
  /** Reject packs with more nodes than this (before allocating). */
  maxTokens?: number;
  /** Reject packs whose activations + peak scratch would exceed this many bytes (before allocating). */
  maxBytes?: number;
  /**
   * LM-head logits [nodes with children, vocab]: 'keep' them in the handle for the backward, or
   * 'recompute' them there (one extra LM-head GEMM, no [M, V] memory). 'auto' (default) keeps
   * them when they take at most 256 MiB and still fit maxBytes.
   */
  logits?: 'auto' | 'keep' | 'recompute';
  /**
   * A training forward: LoRA dropout is applied to the adapters' inputs (its masks are regenerated
   * by the backward). Default false: evaluation, deterministic. No effect without LoRA dropout.
   */
  train?: boolean;
  /**
   * Fixes the dropout masks of a training forward (a non-negative integer; tests and exact
   * replays). Default: every training forward draws fresh masks from the adapters' seed.
   */
  dropoutSeed?: number;
}

/** Activations of one forward, kept for backward. Free with dispose(); GC frees it otherwise. */
export class ForwardHandle {
  constructor(
    /** @internal */ readonly native: NativeHandle,
    /** @internal */ readonly owner: Model,
  ) {}
  get disposed(): boolean {
    return this.native.disposed;
  }
  /** Bytes of activations this handle keeps alive until disposed. */
  get activationBytes(): number {
    return this.native.activationBytes;
  }
  /** Transient bytes the backward of this handle allocates while it runs. */
  get backwardScratchBytes(): number {
    return this.native.backwardScratchBytes;
  }
  /** Peak bytes of the forward + backward of this pack (kept + the larger transient scratch). */
  get peakBytes(): number {
    return this.native.activationBytes + Math.max(this.native.forwardScratchBytes, this.native.backwardScratchBytes);
  }
  get numNodes(): number {
    return this.native.numNodes;
  }
  dispose(): void {
    this.native.dispose();
  }
}

export interface ForwardResult {
  handle: ForwardHandle;
  /** [N] log p(token of node i | its ancestors), read from the parent's hidden state; 0 for roots. */
  logp: Float32Array;
  /** [N] entropy of the distribution node i's token was drawn from (the parent's); 0 for roots. */
  entropy: Float32Array;
  /** [N] 1 where logp/entropy are defined (every node with a parent), 0 for roots. */
  hasLogp: Uint8Array;
}

export interface TensorView {
  /** transformers name, e.g. model.layers.0.self_attn.q_proj.weight (PEFT names for LoRA adapters) */
  name: string;
  shape: readonly number[];
  numel: number;
  /** The live parameter values (a view into the engine's arena, no copy). */
  data: Float32Array;
  /**
   * The live accumulated gradient. Reading it throws for a base tensor while LoRA adapters are on:
   * the frozen base has no gradients (the adapters' are in model.loraTensors).
   */
  grad: Float32Array;
  /** Whether AdamW applies weight decay to it. */
  decay: boolean;
}

/** A tensor view whose gradient array is looked up on each read (it changes when LoRA goes on or off). */
class LiveTensor implements TensorView {
  constructor(
    readonly name: string,
    readonly shape: readonly number[],
    readonly numel: number,
    public data: Float32Array,
    private readonly gradOf: () => Float32Array,
    public decay: boolean,
  ) {}
  get grad(): Float32Array {
    return this.gradOf();
  }
}

export interface OptimizerConfig {
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** Which tensors get weight decay; default: matrices only (no decay on 1-D norms and biases). */
  decay: (t: { name: string; shape: readonly number[] }) => boolean;
}

export interface StepOptions extends Partial<Omit<OptimizerConfig, 'decay'>> {
  lr: number;
}

export interface MemoryReport {
  numParams: number;
  /** Parameters with gradients and optimizer state: the LoRA adapters' while they are on, else numParams. */
  trainableParams: number;
  /** LoRA adapter parameters (0 without LoRA). */
  adapterParams: number;
  paramBytes: number;
  gradBytes: number;
  /** AdamW m and v (allocated at the first step). */
  optimizerBytes: number;
  /** Freed activation/scratch arenas the model keeps for reuse; trimCache() releases them. */
  cachedBytes: number;
}

export interface CreateOptions {
  /** Engine backend for this model; default: the selected one (engineInfo()). */
  backend?: Backend;
  seed?: number;
  /** std of the normal init of linear and embedding weights (transformers' initializer_range). */
  initStd?: number;
}

export const DEFAULT_OPTIMIZER: OptimizerConfig = {
  beta1: 0.9,
  beta2: 0.95,
  eps: 1e-8,
  weightDecay: 0,
  decay: (t) => t.shape.length >= 2,
};

const IGNORED_CHECKPOINT_TENSOR = /\.rotary_emb\.inv_freq$/;

export class Model {
  readonly config: ModelConfig;
  readonly tensors: readonly TensorView[];
  private native: NativeModel | null;
  private readonly byName = new Map<string, TensorView>();
  private optimizer: OptimizerConfig = { ...DEFAULT_OPTIMIZER };
  private hfExtra: Record<string, unknown> = {};
  private baseGrads: Float32Array[] | null = null;
  private loraViews: TensorView[] = [];
  private loraCfg: LoraConfig | null = null;
  // The base's fingerprint, kept while LoRA is on (the base is frozen then); null = recompute.
  private fingerprint: string | null = null;

  /** The backend this model runs on. */
  readonly backend: Backend;

  private constructor(config: ModelConfig, backend?: Backend) {
    this.config = config;
    const { addon, backend: taken } = backend ? loadBackend(backend) : loadEngine();
    this.backend = taken;
    this.native = new addon.NativeModel({
      vocabSize: config.vocabSize,
      hiddenSize: config.hiddenSize,
      intermediateSize: config.intermediateSize,
      numLayers: config.numHiddenLayers,
      numHeads: config.numAttentionHeads,
      numKvHeads: config.numKeyValueHeads,
      headDim: config.headDim,
      rmsNormEps: config.rmsNormEps,
      qkvBias: config.attentionBias,
      tieWordEmbeddings: config.tieWordEmbeddings,
      invFreq: ropeInvFreq(config),
      ropeAttentionScaling: 1,
    });
    const buffers = this.native.tensorBuffers();
    this.baseGrads = buffers.grads?.map((b) => new Float32Array(b)) ?? null;
    this.tensors = this.native.layout().map((t, i) => {
      const grad = () => {
        if (!this.baseGrads)
          throw new Error(`${t.name}: the base weights are frozen while LoRA adapters are on and have no gradient (see model.loraTensors)`);
        return this.baseGrads[i];
      };
      const view = new LiveTensor(
        t.name,
        Object.freeze([...t.shape]),
        t.numel,
        new Float32Array(buffers.params[i]),
        grad,
        this.optimizer.decay(t),
      );
      this.byName.set(t.name, view);
      return view;
    });
  }

  /** Re-reads the gradient and adapter arenas after LoRA was enabled (with cfg), dropped or merged. */
  private refreshViews(cfg: LoraConfig | null): void {
    const native = this.nat();
    this.baseGrads = native.tensorBuffers().grads?.map((b) => new Float32Array(b)) ?? null;
    this.loraCfg = native.loraConfig() ? cfg : null;
    const layout = native.loraLayout();
    const bufs = native.loraBuffers();
    this.loraViews =
      layout && bufs
        ? layout.map(
            (t: NativeTensorLayout, i) =>
              new LiveTensor(
                t.name,
                Object.freeze([...t.shape]),
                t.numel,
                new Float32Array(bufs.params[i]),
                (
                  (g) => () =>
                    g
                )(new Float32Array(bufs.grads[i])),
                this.optimizer.decay(t),
              ),
          )
        : [];
  }

  /** A randomly initialised model of any config (seeded: same seed, same weights). */
  static create(config: ModelConfigInput | ModelConfig, opts: CreateOptions = {}): Model {
    const m = new Model(normalizeConfig(config), opts.backend);
    m.nat().initRandom(opts.seed ?? 0, opts.initStd ?? 0.02);
    return m;
  }

  /** The built-in ~0.9M-parameter model over the byte tokenizer's vocabulary (random init). */
  static tiny(opts: CreateOptions & { config?: Partial<ModelConfig> } = {}): Model {
    return Model.create(tinyConfig(opts.config), opts);
  }

  /** Loads a Hugging Face checkpoint directory: config.json + model.safetensors or a sharded index. */
  static async load(dir: string, opts: { backend?: Backend } = {}): Promise<Model> {
    const cfgPath = join(dir, 'config.json');
    if (!existsSync(cfgPath)) throw new Error(`${dir}: no config.json`);
    const rawCfg = JSON.parse(await fsp.readFile(cfgPath, 'utf8')) as Record<string, unknown>;
    const m = new Model(parseHfConfig(rawCfg), opts.backend);
    m.hfExtra = rawCfg;
    try {
      await m.loadWeights(dir);
      await m.nat().pushParams(); // CUDA: the host arena was written; upload it
    } catch (e) {
      m.dispose();
      throw e;
    }
    return m;
  }

  private async loadWeights(dir: string): Promise<void> {
    const single = join(dir, 'model.safetensors');
    const index = join(dir, 'model.safetensors.index.json');
    let files: string[];
    let weightMap: Record<string, string> | null = null;
    if (existsSync(index)) {
      const idx = JSON.parse(await fsp.readFile(index, 'utf8')) as { weight_map?: unknown };
      if (typeof idx.weight_map !== 'object' || idx.weight_map === null)
        throw new SafetensorsError(`${index}: weight_map missing or not an object`);
      weightMap = idx.weight_map as Record<string, string>;
      for (const f of Object.values(weightMap))
        if (typeof f !== 'string' || basename(f) !== f || f === '..' || f === '.')
          throw new SafetensorsError(`${index}: shard name ${JSON.stringify(f)} must be a plain file name in ${dir}`);
      files = [...new Set(Object.values(weightMap))];
    } else if (existsSync(single)) {
      files = ['model.safetensors'];
    } else {
      throw new Error(`${dir}: neither model.safetensors nor model.safetensors.index.json`);
    }
    const loaded = new Set<string>();
    for (const f of files) {
      const path = join(dir, f);
      const st = parseSafetensors(await fsp.readFile(path), path);
      for (const [name, t] of st.tensors) {
        if (weightMap && weightMap[name] !== f)
          throw new SafetensorsError(`${path}: tensor ${name} is not listed for this shard in the index`);
        const view = this.byName.get(name);
        if (!view) {
          if (IGNORED_CHECKPOINT_TENSOR.test(name)) continue;
          if (name === 'lm_head.weight' && this.config.tieWordEmbeddings) continue; // tied: same as the embedding
          throw new SafetensorsError(`${path}: unexpected tensor ${name} (not part of this ${this.config.modelType} model)`);
        }
        if (t.shape.length !== view.shape.length || t.shape.some((d, i) => d !== view.shape[i]))
          throw new SafetensorsError(`${path}: tensor ${name} has shape [${t.shape.join(', ')}], expected [${view.shape.join(', ')}]`);
        if (loaded.has(name)) throw new SafetensorsError(`${path}: tensor ${name} appears twice`);
        toFloat32(t, view.data, `${path}: ${name}`);
        loaded.add(name);
      }
    }
    const missing = this.tensors.filter((t) => !loaded.has(t.name)).map((t) => t.name);
    if (missing.length)
      throw new SafetensorsError(`${dir}: missing tensors: ${missing.slice(0, 8).join(', ')}${missing.length > 8 ? ', ...' : ''}`);
  }

  /**
   * Writes config.json + model.safetensors (f32), or shards + index when maxShardBytes is given.
   * With LoRA adapters on it writes the MERGED weights (W + (alpha / r) B A: what the model
   * computes), leaving the model's base and adapters as they are; saveAdapter() writes the adapter.
   */
  async save(dir: string, opts: { maxShardBytes?: number } = {}): Promise<void> {
    const native = this.nat();
    await native.pullParams(); // CUDA: bring the trained weights (and adapters) into the host arenas
    await fsp.mkdir(dir, { recursive: true });
    await fsp.writeFile(join(dir, 'config.json'), JSON.stringify(toHfConfig(this.config, this.hfExtra), null, 2) + '\n');
    const lora = this.loraCfg;
    const adapted = (name: string) =>
      lora !== null && lora.targets.some((t) => name.endsWith(`.${t}.weight`)) && name.startsWith('model.layers.');
    const all = this.tensors.map((t, i) => {
      let data = t.data;
      if (adapted(t.name)) {
        data = new Float32Array(t.numel);
        native.copyMergedTensor(i, data);
      }
      return { name: t.name, shape: t.shape, dtype: 'F32' as const, data };
    });
    const meta = { format: 'pt' };
    if (!opts.maxShardBytes) {
      await writeSafetensors(join(dir, 'model.safetensors'), all, meta);
      return;
    }
    const shards: (typeof all)[] = [[]];
    let size = 0;
    for (const t of all) {
      if (size > 0 && size + t.data.byteLength > opts.maxShardBytes) {
        shards.push([]);
        size = 0;
      }
      shards[shards.length - 1].push(t);
      size += t.data.byteLength;
    }
    const pad = (i: number) => String(i).padStart(5, '0');
    const weightMap: Record<string, string> = {};
    for (let i = 0; i < shards.length; i++) {
      const file = `model-${pad(i + 1)}-of-${pad(shards.length)}.safetensors`;
      await writeSafetensors(join(dir, file), shards[i], meta);
      for (const t of shards[i]) weightMap[t.name] = file;
    }
    const total = all.reduce((a, t) => a + t.data.byteLength, 0);
    await fsp.writeFile(
      join(dir, 'model.safetensors.index.json'),
      JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2) + '\n',
    );
  }

  /**
   * On the CUDA backend the tensor views (`t.data`, `t.grad`) are a host mirror of device memory:
   * syncToHost() refreshes them (weights, and gradients when asked); syncToDevice() uploads what
   * was written into `t.data`. Both are no-ops on the CPU backend, where the views are the weights.
   * load() and save() call them themselves.
   */
  async syncToHost(opts: { grads?: boolean } = {}): Promise<void> {
    await this.nat().pullParams();
    if (opts.grads) await this.nat().pullGrads();
  }

  async syncToDevice(): Promise<void> {
    this.fingerprint = null; // the caller may have written new base weights
    await this.nat().pushParams();
  }

  // ---------------- LoRA ----------------

  /**
   * Adds rank-r LoRA adapters to the chosen projections of every layer (replacing any the model
   * had): A kaiming-uniform as PEFT initialises it, B zero, so the model's output is unchanged until
   * the first step. The base is frozen from then on: its gradients and AdamW moments are freed,
   * backward() computes the adapters' gradients only, and zeroGrad / gradNorm / clipGradNorm / step /
   * optimizerState work on the adapters. A bad config throws LoraConfigError and changes nothing.
   */
  async enableLora(opts: LoraOptions): Promise<LoraConfig> {
    const cfg = normalizeLoraOptions(opts, this.config);
    await this.nat().enableLora({ ...cfg, targets: [...cfg.targets] });
    this.refreshViews(cfg);
    return this.lora as LoraConfig;
  }

  /** Drops the adapters without merging them; the base is trainable again (with fresh AdamW moments). */
  async disableLora(): Promise<void> {
    await this.nat().disableLora();
    this.refreshViews(null);
  }

  /**
   * Merges the adapters into the base (W += (alpha / r) B A) and drops them: the model then
   * computes what it computed with them, as a plain model (what a server does to apply an adapter).
   */
  async mergeLora(): Promise<void> {
    if (!this.loraCfg) throw new Error('mergeLora: the model has no LoRA adapters');
    this.fingerprint = null;
    await this.nat().mergeLora();
    this.refreshViews(null);
  }

  /** The LoRA configuration while adapters are on, else null. */
  get lora(): LoraConfig | null {
    return this.loraCfg ? { ...this.loraCfg, targets: [...this.loraCfg.targets] } : null;
  }

  /** The adapter tensors (PEFT names: A [r, in] then B [out, r] per layer and target); empty without LoRA. */
  get loraTensors(): readonly TensorView[] {
    return this.loraViews;
  }

  /** What the optimizer updates: the LoRA adapters while they are on, else every tensor. */
  get trainableTensors(): readonly TensorView[] {
    return this.loraCfg ? this.loraViews : this.tensors;
  }

  /**
   * "sha256:<hex>" of the base weights (names, shapes, float32 values): an adapter records the
   * fingerprint of the base it was trained on, and loadAdapter() refuses another base.
   */
  async baseFingerprint(): Promise<string> {
    if (this.fingerprint) return this.fingerprint;
    await this.nat().pullParams();
    const f = weightsFingerprint(this.tensors);
    if (this.loraCfg) this.fingerprint = f; // frozen while the adapters are on
    return f;
  }

  /**
   * Writes the adapters in PEFT's layout (adapter_config.json, adapter_model.safetensors with the
   * base's shape and fingerprint in its metadata) and, with optimizer, their AdamW moments and step
   * (adapter_optimizer.safetensors) for an exact resume.
   */
  async saveAdapter(dir: string, opts: { optimizer?: boolean; baseModelNameOrPath?: string | null } = {}): Promise<void> {
    const lora = this.loraCfg;
    if (!lora) throw new Error('saveAdapter: the model has no LoRA adapters');
    await this.nat().pullParams();
    const baseFingerprint = await this.baseFingerprint();
    await writeAdapter(dir, {
      config: lora,
      baseModelNameOrPath: opts.baseModelNameOrPath ?? null,
      base: this.config,
      baseFingerprint,
      tensors: this.loraViews,
      optimizer: opts.optimizer ? this.optimizerState() : undefined,
    });
  }

  /**
   * Loads a PEFT LoRA adapter directory onto this model's base (replacing any adapters). Everything
   * is checked before anything changes: the config, every tensor's name and shape, the base shape
   * and fingerprint the adapter records (an adapter of another base is refused; PEFT's own files
   * record none and are checked by shape only) and, with optimizer, its saved AdamW state, which is
   * then restored for an exact resume. Resolves with the adapter's configuration.
   */
  async loadAdapter(dir: string, opts: { optimizer?: boolean } = {}): Promise<LoraConfig> {
    const read = await readAdapter(dir, this.config, { readOptimizer: opts.optimizer });
    if (read.baseFingerprint !== null) {
      const mine = await this.baseFingerprint();
      if (read.baseFingerprint !== mine)
        throw new LoraAdapterError(
          `${dir}: the adapter was trained on another base model (base fingerprint ${read.baseFingerprint.slice(0, 19)}..., this model's is ${mine.slice(0, 19)}...)`,
        );
    }
    await this.enableLora(read.config);
    for (const t of this.loraViews) t.data.set(read.tensors.get(t.name) as Float32Array);
    await this.nat().pushParams(); // CUDA: upload the adapters
    if (read.optimizer?.m && read.optimizer.v)
      this.setOptimizerState({ step: read.optimizer.step, m: read.optimizer.m, v: read.optimizer.v });
    return this.lora as LoraConfig;
  }

  /** @internal The native model (the generator binds to it). */
  nat(): NativeModel {
    if (!this.native) throw new Error('model is disposed');
    return this.native;
  }

  tensor(name: string): TensorView {
    const t = this.byName.get(name);
    if (!t) throw new Error(`no tensor named ${name}`);
    return t;
  }

  get numParams(): number {
    return this.tensors.reduce((a, t) => a + t.numel, 0);
  }

  /** Parameters minus the input embedding table (the LM head counts: it is a real GEMM per token). */
  get numNonEmbeddingParams(): number {
    return this.numParams - this.tensor('model.embed_tokens.weight').numel;
  }

  /**
   * Forward over a packed tree. Rejects (never crashes) on: empty pack, parents out of range or
   * not preceding their child (which includes cycles), tokens out of [0, vocab), pack over the
   * limits. The tokens/parents arrays must not change until the promise settles.
   */
  async forward(pack: PackInput, opts: ForwardOptions = {}): Promise<ForwardResult> {
    const native = this.nat();
    const { tokens, parents } = pack;
    if (!(tokens instanceof Int32Array) || !(parents instanceof Int32Array))
      throw new TypeError('forward: pack.tokens and pack.parents must be Int32Arrays');
    const n = tokens.length;
    const logp = new Float32Array(n);
    const entropy = new Float32Array(n);
    const mode = ({ auto: 0, keep: 1, recompute: 2 } as const)[opts.logits ?? 'auto'];
    if (mode === undefined) throw new TypeError(`forward: logits must be 'auto', 'keep' or 'recompute'`);
    if (opts.dropoutSeed !== undefined && (!Number.isSafeInteger(opts.dropoutSeed) || opts.dropoutSeed < 0))
      throw new TypeError('forward: dropoutSeed must be a non-negative integer');
    const h = await native.forward(
      tokens,
      parents,
      logp,
      entropy,
      opts.maxTokens ?? 0,
      opts.maxBytes ?? 0,
      mode,
      opts.train === true,
      opts.dropoutSeed ?? -1,
    );
    const hasLogp = new Uint8Array(n);
    for (let i = 0; i < n; i++) hasLogp[i] = parents[i] >= 0 ? 1 : 0;
    return { handle: new ForwardHandle(h, this), logp, entropy, hasLogp };
  }

  /**
   * Accumulates gradients of L into the parameters' grads, given dL/dlogp per node (and optionally
   * dL/dentropy per node). Coefficients of roots must be 0. Call zeroGrad() between optimizer steps.
   */
  async backward(handle: ForwardHandle | ForwardResult, dLdlogp: Float32Array, dLdEntropy?: Float32Array): Promise<void> {
    const h = handle instanceof ForwardHandle ? handle : handle.handle;
    if (h.owner !== this) throw new Error('backward: the handle belongs to another model');
    if (!(dLdlogp instanceof Float32Array)) throw new TypeError('backward: dLdlogp must be a Float32Array');
    if (dLdEntropy !== undefined && !(dLdEntropy instanceof Float32Array))
      throw new TypeError('backward: dLdEntropy must be a Float32Array');
    await this.nat().backward(h.native, dLdlogp, dLdEntropy ?? null);
  }

  async zeroGrad(): Promise<void> {
    await this.nat().zeroGrad();
  }

  /** Global L2 norm of the accumulated gradients. */
  async gradNorm(): Promise<number> {
    return this.nat().gradNorm();
  }

  /** Scales gradients so that their global L2 norm is at most maxNorm; resolves with the norm before clipping. */
  async clipGradNorm(maxNorm: number): Promise<number> {
    return this.nat().clipGradNorm(maxNorm);
  }

  /** Sets AdamW defaults (betas, eps, weight decay, which tensors decay). */
  configureOptimizer(cfg: Partial<OptimizerConfig>): void {
    this.optimizer = { ...this.optimizer, ...cfg };
    for (const t of [...this.tensors, ...this.loraViews]) t.decay = this.optimizer.decay(t);
  }

  /**
   * One AdamW step with learning rate opts.lr (other fields override the configured defaults for
   * this step), over the trainable tensors: the LoRA adapters while they are on, else every tensor.
   */
  async step(opts: StepOptions): Promise<number> {
    const o = { ...this.optimizer, ...opts };
    const trainable = this.trainableTensors;
    const decayMask = new Uint8Array(trainable.length);
    trainable.forEach((t, i) => (decayMask[i] = t.decay ? 1 : 0));
    if (!this.loraCfg) this.fingerprint = null; // the base changes
    return this.nat().adamwStep({
      lr: o.lr,
      beta1: o.beta1,
      beta2: o.beta2,
      eps: o.eps,
      weightDecay: o.weightDecay,
      decayMask,
    });
  }

  get stepCount(): number {
    return this.nat().stepCount();
  }

  /**
   * Copies of AdamW's moments (m, v: one float per trainable parameter, in the arena's tensor order:
   * the LoRA adapters' while they are on) and its step count, for checkpoints that resume training
   * exactly; null moments before the first step.
   * On the CUDA backend they are copied from the device (synchronously: call it between steps).
   */
  optimizerState(): { step: number; m: Float32Array | null; v: Float32Array | null } {
    return this.nat().optimizerState();
  }

  /** Restores what optimizerState() returned (same model shape). */
  setOptimizerState(state: { step: number; m: Float32Array; v: Float32Array }): void {
    this.nat().setOptimizerState(state.step, state.m, state.v);
  }

  memory(): MemoryReport {
    const m = this.nat().memory();
    return {
      numParams: m.numParams,
      trainableParams: m.trainableParams,
      adapterParams: m.adapterParams,
      paramBytes: m.paramBytes,
      gradBytes: m.gradBytes,
      optimizerBytes: m.optimizerBytes,
      cachedBytes: m.cachedBytes,
    };
  }

  /** Returns the cached activation/scratch arenas to the operating system. */
  trimCache(): void {
    this.nat().trimCache();
  }

  /** Releases the model; tensor views already taken stay readable (they co-own the arena). */
  dispose(): void {
    this.native?.dispose();
    this.native = null;
  }

  get disposed(): boolean {
    return this.native === null;
  }
}
