import type { Model } from '@anvil/engine';
import type { FinishReason, SamplingParams } from './backend';

/**
 * The small surface the embedded backend needs from the native engine's generation API
 * (batched decode with KV cache, sampling, prefix cache), which libs/engine is growing.
 * Kept here, owned by the proxy, so the engine can evolve behind it; an adapter from the
 * engine's real export satisfies it (see createEngineGenerator).
 */
export interface EmbeddedGenerator {
  /**
   * Samples up to `sampling.maxTokens` tokens after `promptIds`, calling onToken for each as it
   * is sampled. `logprob` is the log-prob of the token under the distribution it was sampled
   * from: after temperature, top-k and top-p (the engine's sampler knows it exactly, so the
   * embedded backend has no raw-vs-processed caveat; with temperature 0 the engine reports the
   * policy's own log-prob, and it also returns `rawLogprobs`, the policy's log-probs, which this
   * interface does not need). Aborting `signal` stops at the next token boundary and resolves
   * with finishReason 'abort'. Invalid prompts (empty, token outside the vocab, no position left)
   * reject.
   */
  generate(
    promptIds: readonly number[],
    sampling: SamplingParams,
    opts: {
      signal?: AbortSignal;
      onToken?: (id: number, logprob: number, rawLogprob: number, top?: readonly { id: number; logprob: number }[]) => void;
      /**
       * Constrained decoding: before each token `allowed(remaining)` gives the ids that may be
       * sampled (a bitmask over the vocabulary), and the engine samples from the policy restricted
       * to them and renormalised (`logprob` is under that distribution); `advance(id)` is told
       * the sampled id before onToken. A constraint that throws rejects this generation.
       */
      constraint?: { allowed(remaining: number): Uint32Array; advance(id: number): void };
    },
  ): Promise<EmbeddedGeneration>;
  /** Token ids the current model has (its vocab_size; a checkpoint load may change it). */
  readonly vocabSize: number;
  /** Loads Hugging Face weights (config.json + safetensors) from a directory; later generations use them. */
  loadCheckpoint(dir: string): Promise<void>;
  /** Takes over a model built in memory (a LoRA adapter merged into a copy of the base) as the weights, as loadCheckpoint does. */
  loadModel(model: Model): Promise<void>;
  stats(): EmbeddedGeneratorStats;
  /** Aborts what runs and releases the engine's memory. */
  close?(): Promise<void>;
}

export interface EmbeddedGeneration {
  outputIds: number[];
  logprobs: number[];
  finishReason: FinishReason;
  /** Prompt tokens whose KV came from the prefix cache. */
  cachedPromptTokens: number;
  /**
   * With sampling.topLogprobs = k > 0: per sampled token the k most likely tokens, most likely
   * first, under the policy itself (the engine's raw logits, as vLLM's default raw logprobs).
   */
  topLogprobs?: { id: number; logprob: number }[][];
}

export interface EmbeddedGeneratorStats {
  /** Sequences decoding now. */
  activeSequences: number;
  prefixCacheHitTokens: number;
  prefixCacheLookupTokens: number;
}

/**
 * Wires the embedded backend to @anvil/engine's `createGenerator(source, options)`: a checkpoint
 * directory (EMBEDDED_CHECKPOINT_DIR), or, when none is configured, the engine's built-in tiny
 * random model seeded with `options.seed` (default 0; the byte tokenizer's vocabulary): enough to
 * boot, route and test the service without weights. Loaded lazily so the external backends never
 * load the native addon.
 */
export async function createEngineGenerator(
  checkpointDir: string | undefined,
  options: { maxBatch?: number; seed?: number; prefixCacheBytes?: number } = {},
): Promise<EmbeddedGenerator> {
  const { createGenerator } = await import('@anvil/engine');
  return createGenerator(checkpointDir || undefined, options);
}
