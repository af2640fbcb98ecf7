// Generation over the native engine: a continuous-batching scheduler in TypeScript over the
// KV-cached native step (native/generate.cc). One step = one AsyncWorker on the libuv pool that
// prefills the pending prompt tokens of newly admitted sequences and decodes one token for every
// active sequence, as one batch. New requests are admitted and finished/aborted ones removed
// between steps, so the event loop keeps turning and concurrent requests share GEMMs.
import { loadBackend } from './loader';
import { Model } from './model';
import type { NativeGenerator } from './native';

export type GenerationFinishReason = 'stop' | 'length' | 'abort';

export interface GenerationSampling {
  /** Tokens to sample at most (0 resolves at once with no output, finishReason 'length'). */
  maxTokens: number;
  /** 0 = greedy. Default 1. */
  temperature?: number;
  /** Nucleus mass in (0, 1]; 1 = disabled (default). */
  topP?: number;
  /** 0 = disabled (default). */
  topK?: number;
  /** Seeds this sequence's sampler (xoshiro256**); null/undefined = a random seed. */
  seed?: number | null;
  /** Generation stops after sampling one of these; the stop token is part of the output. */
  stopIds?: readonly number[];
  /** 0..20 most likely alternatives to report per sampled token (Generation.topLogprobs). Default 0. */
  topLogprobs?: number;
}

/** One alternative at a sampled position: a token id and its log-prob under the policy itself. */
export interface TopLogprob {
  id: number;
  logprob: number;
}

/**
 * Constrained decoding of one generation (libs/guided-decoding's GrammarConstraint is one): before
 * each token the generator asks which ids may be sampled, and the engine samples from the policy
 * restricted to them and renormalised (temperature, top-k and top-p within the mask), so
 * `logprobs` are those of the constrained distribution the token was drawn from; then it reports
 * the sampled id.
 */
export interface TokenConstraint {
  /**
   * Bitmask of the ids allowed next: ceil(vocabSize / 32) words, bit (id & 31) of word id >> 5.
   * `remaining`: tokens the generation may still sample, this one included (max tokens or the
   * positions left), so a constraint can keep its output finishable.
   */
  allowed(remaining: number): Uint32Array;
  /** The id just sampled (before onToken sees it). */
  advance(id: number): void;
}

export interface GenerationCallbacks {
  /** Aborting stops the sequence at the next step; generate() resolves with finishReason 'abort'. */
  signal?: AbortSignal;
  /** Restricts every sampled token to the ids it allows (see TokenConstraint); a failing constraint rejects this generation only. */
  constraint?: TokenConstraint;
  /** Called for each token as it is sampled, in order, before generate() resolves. */
  onToken?: (id: number, logprob: number, rawLogprob: number, top?: TopLogprob[]) => void;
}

export interface Generation {
  outputIds: number[];
  /**
   * Log-prob of each sampled token under the distribution it was SAMPLED FROM: softmax of the
   * logits after temperature, top-k and top-p (renormalised over the kept set). With
   * temperature 1 and no top-k/top-p this is the policy's own log-prob. With temperature 0
   * (greedy) the sampled-from distribution is a point mass; we report the policy's log-prob
   * (rawLogprobs) instead of 0.
   */
  logprobs: number[];
  /** Log-prob of each sampled token under the policy itself (log softmax of the raw logits): π_old for training. */
  rawLogprobs: number[];
  finishReason: GenerationFinishReason;
  /** Prompt tokens whose KV came from the prefix cache. */
  cachedPromptTokens: number;
  /**
   * With sampling.topLogprobs = k > 0: per sampled token, the k most likely tokens under the policy
   * itself (log softmax of the raw logits, as vLLM's default raw logprobs), most likely first.
   */
  topLogprobs?: TopLogprob[][];
}

export interface GeneratorStats {
  activeSequences: number;
  /** Requests waiting for a batch slot. */
  queuedSequences: number;
  prefixCacheHitTokens: number;
  prefixCacheLookupTokens: number;
  prefixCacheBytes: number;
  prefixCacheEntries: number;
  /** Batched steps run so far. */
  steps: number;
}

export interface GeneratorOptions {
  /** Sequences decoded together at most; further requests wait (default 32). */
  maxBatch?: number;
  /** Byte budget of the prefix cache (finished sequences' KV, LRU; default 256 MiB; 0 disables it). */
  prefixCacheBytes?: number;
  /** Positions a sequence may reach (prompt + output; default the model's max_position_embeddings). */
  maxPositions?: number;
  /** Seed of the built-in tiny model when createGenerator gets no checkpoint. */
  seed?: number;
}

interface Sequence {
  id: number;
  prompt: Int32Array;
  sampling: Required<Omit<GenerationSampling, 'stopIds' | 'seed'>> & { seed: number; stop: Set<number> };
  callbacks: GenerationCallbacks;
  out: Generation;
  resolve: (g: Generation) => void;
  reject: (e: unknown) => void;
}

const DEFAULT_CACHE_BYTES = 256 << 20;

export class Generator {
  private native: NativeGenerator;
  private readonly waiting: Sequence[] = [];
  private readonly active = new Map<number, Sequence>();
  private nextId = 1;
  private running = false;
  private paused: Promise<void> | null = null;
  private idle: (() => void) | null = null;
  private steps = 0;
  private clearPending = false;
  private stepping = false;
  private closed = false;
  private readonly maxBatch: number;
  private readonly cacheBytes: number;

  constructor(
    private model: Model,
    private readonly opts: GeneratorOptions = {},
    private ownsModel = false,
  ) {
    this.maxBatch = opts.maxBatch ?? 32;
    if (!Number.isInteger(this.maxBatch) || this.maxBatch < 1) throw new Error('maxBatch must be a positive integer');
    this.cacheBytes = opts.prefixCacheBytes ?? DEFAULT_CACHE_BYTES;
    this.native = this.makeNative();
  }

  get maxPositions(): number {
    return this.opts.maxPositions ?? this.model.config.maxPositionEmbeddings;
  }

  /** The model generations run on (replaced by loadCheckpoint when the config changes). */
  get currentModel(): Model {
    return this.model;
  }

  /** Token ids the current model has (its vocab_size): every id it samples is below it. */
  get vocabSize(): number {
    return this.model.config.vocabSize;
  }

  private makeNative(): NativeGenerator {
    const { addon } = loadBackend(this.model.backend); // the addon that owns the model
    return new addon.NativeGenerator(this.model.nat(), this.maxPositions, this.cacheBytes);
  }

  /**
   * Samples up to sampling.maxTokens tokens after promptIds. Rejects (a JS Error, never a crash)
   * on an empty prompt, a token outside [0, vocab), a prompt that leaves no position to
   * generate, or invalid sampling values.
   */
  generate(
    promptIds: readonly number[] | Int32Array,
    sampling: GenerationSampling,
    callbacks: GenerationCallbacks = {},
  ): Promise<Generation> {
    return new Promise<Generation>((resolve, reject) => {
      if (this.closed) throw new Error('generator is closed');
      const { maxTokens } = sampling;
      if (!Number.isInteger(maxTokens) || maxTokens < 0) throw new Error('maxTokens must be an integer >= 0');
      for (const t of promptIds) if (!Number.isInteger(t)) throw new Error(`prompt token ${String(t)} is not an integer`);
      const temperature = sampling.temperature ?? 1;
      const topP = sampling.topP ?? 1;
      const topK = sampling.topK ?? 0;
      if (!(temperature >= 0) || !Number.isFinite(temperature)) throw new Error('temperature must be a finite number >= 0');
      if (!(topP > 0 && topP <= 1)) throw new Error('topP must be in (0, 1]');
      if (!Number.isInteger(topK) || topK < 0) throw new Error('topK must be an integer >= 0');
      const topLogprobs = sampling.topLogprobs ?? 0;
      if (!Number.isInteger(topLogprobs) || topLogprobs < 0 || topLogprobs > 20)
        throw new Error('topLogprobs must be an integer in [0, 20]');
      const seed = sampling.seed ?? Math.floor(Math.random() * 2 ** 52);
      if (!Number.isSafeInteger(seed)) throw new Error('seed must be a safe integer');
      const prompt = Int32Array.from(promptIds);
      if (prompt.length === 0) throw new Error('empty prompt: generation needs at least one prompt token');
      if (prompt.length >= this.maxPositions)
        throw new Error(`prompt has ${prompt.length} tokens: it leaves no room to generate within ${this.maxPositions} positions`);
      const out: Generation = { outputIds: [], logprobs: [], rawLogprobs: [], finishReason: 'length', cachedPromptTokens: 0 };
      if (topLogprobs > 0) out.topLogprobs = [];
      if (callbacks.signal?.aborted) return resolve({ ...out, finishReason: 'abort' });
      if (maxTokens === 0) return resolve(out);
      const seq: Sequence = {
        id: this.nextId++,
        prompt,
        sampling: { maxTokens, temperature, topP, topK, seed, topLogprobs, stop: new Set(sampling.stopIds ?? []) },
        callbacks,
        out,
        resolve,
        reject,
      };
      this.waiting.push(seq);
      this.kick();
    });
  }

  stats(): GeneratorStats {
    return { ...this.native.stats(), activeSequences: this.active.size, queuedSequences: this.waiting.length, steps: this.steps };
  }

  /** Drops every cached prefix (between steps: a step in flight is never waited for on the event loop). */
  clearPrefixCache(): void {
    if (this.stepping) this.clearPending = true;
    else this.native.clearCache();
  }

  /**
   * Loads a Hugging Face checkpoint. Steps pause while it loads; same config: the weights are
   * copied into the current model in place and running sequences continue under them (their
   * earlier KV was computed by the old weights, as in vLLM's in-place update); a different
   * config: running sequences finish with 'abort' and the generator moves to the new model.
   * The prefix cache is cleared either way. Resolves once later steps use the new weights.
   */
  async loadCheckpoint(dir: string): Promise<void> {
    await this.swapIn(() => Model.load(dir));
  }

  /**
   * Takes over `model` (a plain model, no unmerged adapters) as the weights, exactly as
   * loadCheckpoint takes a checkpoint's: same config, its weights are copied in place and `model`
   * is disposed; another config, it becomes the generator's model. What a server that builds its
   * weights in memory uses (a LoRA adapter merged into its copy of the base).
   */
  async loadModel(model: Model): Promise<void> {
    if (model.lora) throw new Error('loadModel: merge the LoRA adapters first (mergeLora)');
    await this.swapIn(async () => model);
  }

  private async swapIn(load: () => Promise<Model>): Promise<void> {
    while (this.paused) await this.paused;
    let release!: () => void;
    this.paused = new Promise<void>((r) => (release = r));
    try {
      await this.waitIdle();
      const loaded = await load();
      const sameShape =
        loaded.tensors.length === this.model.tensors.length &&
        loaded.tensors.every((t, i) => t.name === this.model.tensors[i].name && t.numel === this.model.tensors[i].numel) &&
        JSON.stringify(loaded.config) === JSON.stringify(this.model.config);
      if (sameShape) {
        await loaded.syncToHost();
        loaded.tensors.forEach((t, i) => this.model.tensors[i].data.set(t.data));
        loaded.dispose();
        await this.model.syncToDevice(); // CUDA: the views are a host mirror of the device weights
        this.native.clearCache();
      } else {
        for (const seq of [...this.active.values()]) this.finish(seq, 'abort', false);
        if (this.ownsModel) this.model.dispose();
        this.model = loaded;
        this.ownsModel = true;
        this.native = this.makeNative();
      }
    } finally {
      this.paused = null;
      release();
      this.kick();
    }
  }

  /** Aborts everything and releases the model when the generator owns it. */
  async close(): Promise<void> {
    this.closed = true;
    for (const s of this.waiting.splice(0)) s.resolve({ ...s.out, finishReason: 'abort' });
    for (const s of [...this.active.values()]) s.callbacks = { ...s.callbacks, signal: AbortSignal.abort() };
    await this.waitIdle();
    for (const s of [...this.active.values()]) this.finish(s, 'abort', false);
    if (this.ownsModel) this.model.dispose();
  }

  private waitIdle(): Promise<void> {
    if (!this.running) return Promise.resolve();
    return new Promise((r) => {
      const prev = this.idle;
      this.idle = () => {
        prev?.();
        r();
      };
    });
  }

  private kick(): void {
    if (this.running || this.paused) return;
    if (this.waiting.length === 0 && this.active.size === 0) return;
    this.running = true;
    void this.loop()
      .catch((e: unknown) => this.failAll(e))
      .finally(() => {
        this.running = false;
        const idle = this.idle;
        this.idle = null;
        idle?.();
        this.kick();
      });
  }

  /** An unexpected scheduler failure rejects every request instead of leaving them pending. */
  private failAll(e: unknown): void {
    for (const seq of [...this.active.values(), ...this.waiting.splice(0)]) {
      this.active.delete(seq.id);
      try {
        this.native.remove(seq.id, false);
      } catch {
        // already gone
      }
      seq.reject(e);
    }
  }

  private finish(seq: Sequence, reason: GenerationFinishReason, keepKv: boolean): void {
    this.active.delete(seq.id);
    this.native.remove(seq.id, keepKv);
    seq.out.finishReason = reason;
    seq.resolve(seq.out);
  }

  /**
   * The masks of the constrained sequences for the next step (undefined when none is). A
   * constraint that throws, or returns a mask of the wrong size or one that allows nothing,
   * rejects its own generation here, before the step, so the batch goes on without it.
   */
  private constraintMasks(): Map<number, Uint32Array> | undefined {
    let masks: Map<number, Uint32Array> | undefined;
    const words = Math.ceil(this.model.config.vocabSize / 32);
    for (const seq of [...this.active.values()]) {
      const constraint = seq.callbacks.constraint;
      if (!constraint) continue;
      const n = seq.out.outputIds.length;
      const remaining = Math.min(seq.sampling.maxTokens - n, this.maxPositions - seq.prompt.length - n);
      try {
        const mask = constraint.allowed(remaining);
        if (!(mask instanceof Uint32Array) || mask.length !== words)
          throw new Error(`constraint mask must be a Uint32Array of ${words} words (vocabulary ${this.model.config.vocabSize})`);
        if (!mask.some((w) => w !== 0)) throw new Error('constraint allows no token');
        (masks ??= new Map()).set(seq.id, mask);
      } catch (e) {
        this.active.delete(seq.id);
        this.native.remove(seq.id, false);
        seq.reject(e);
      }
    }
    return masks;
  }

  private async loop(): Promise<void> {
    while (!this.paused && (this.waiting.length > 0 || this.active.size > 0)) {
      // admit
      while (this.active.size < this.maxBatch) {
        const seq = this.waiting.shift();
        if (!seq) break;
        if (seq.callbacks.signal?.aborted) {
          seq.resolve({ ...seq.out, finishReason: 'abort' });
          continue;
        }
        try {
          const s = seq.sampling;
          seq.out.cachedPromptTokens = this.native.add(seq.id, seq.prompt, s.temperature, s.topP, s.topK, s.seed, s.topLogprobs);
          this.active.set(seq.id, seq);
        } catch (e) {
          seq.reject(e);
        }
      }
      // aborted sequences leave before the step (their KV so far is valid and is cached)
      for (const seq of [...this.active.values()]) if (seq.callbacks.signal?.aborted) this.finish(seq, 'abort', true);
      if (this.active.size === 0) continue;
      const masks = this.constraintMasks();
      if (this.active.size === 0) continue;
      const batch = [...this.active.values()];
      let res;
      try {
        this.stepping = true;
        res = await this.native.step(
          batch.map((s) => s.id),
          masks && batch.map((s) => masks.get(s.id) ?? null),
        );
      } catch (e) {
        for (const seq of batch) {
          this.active.delete(seq.id);
          this.native.remove(seq.id, false);
          seq.reject(e);
        }
        continue;
      } finally {
        this.stepping = false;
        if (this.clearPending) {
          this.clearPending = false;
          this.native.clearCache();
        }
      }
      this.steps++;
      batch.forEach((seq, b) => {
        const id = res.tokens[b];
        const lp = res.logprobs[b];
        const raw = res.rawLogprobs[b];
        const constraint = seq.callbacks.constraint;
        if (constraint) {
          try {
            constraint.advance(id);
          } catch (e) {
            this.active.delete(seq.id);
            this.native.remove(seq.id, false);
            seq.reject(e);
            return;
          }
        }
        seq.out.outputIds.push(id);
        seq.out.logprobs.push(lp);
        seq.out.rawLogprobs.push(raw);
        let top: TopLogprob[] | undefined;
        if (seq.out.topLogprobs && res.topK && res.topCounts && res.topIds && res.topLogprobs) {
          top = [];
          for (let i = 0; i < res.topCounts[b]; i++)
            top.push({ id: res.topIds[b * res.topK + i], logprob: res.topLogprobs[b * res.topK + i] });
          seq.out.topLogprobs.push(top);
        }
        try {
          seq.callbacks.onToken?.(id, lp, raw, top);
        } catch {
          // a throwing consumer must not stall the other sequences
        }
        const n = seq.out.outputIds.length;
        if (seq.sampling.stop.has(id)) this.finish(seq, 'stop', true);
        else if (n >= seq.sampling.maxTokens || seq.prompt.length + n >= this.maxPositions) this.finish(seq, 'length', true);
      });
    }
  }
}

/**
 * A generator over `source`: a Model (shared, not disposed by the generator), a checkpoint
 * directory (loaded; owned), or nothing (the built-in tiny model with `opts.seed`; owned).
 */
export async function createGenerator(source: Model | string | undefined, opts: GeneratorOptions = {}): Promise<Generator> {
  if (source instanceof Model) return new Generator(source, opts, false);
  const model = typeof source === 'string' ? await Model.load(source) : Model.tiny({ seed: opts.seed ?? 0 });
  return new Generator(model, opts, true);
}
