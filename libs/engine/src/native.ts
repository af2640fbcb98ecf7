// Typed interface of every export of the native addon (anvil_engine.node). The addon itself is
// untyped JavaScript to TypeScript; the loader casts it to NativeAddon once, here is the contract.

/** Model shape as the addon takes it (the loader derives it from a Hugging Face config). */
export interface NativeModelConfig {
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  rmsNormEps: number;
  qkvBias: boolean;
  tieWordEmbeddings: boolean;
  /** [headDim / 2] RoPE inverse frequencies with rope_scaling applied. */
  invFreq: Float32Array;
  /** Multiplies cos and sin (transformers' attention_scaling; 1 for default, linear, llama3). */
  ropeAttentionScaling: number;
}

/** One tensor of the parameter arena, named as in transformers. Offsets/numel in floats. */
export interface NativeTensorLayout {
  name: string;
  shape: number[];
  offset: number;
  numel: number;
}

export interface NativeMemory {
  numParams: number;
  paramBytes: number;
  gradBytes: number;
  /** AdamW m and v; 0 until the first optimizer step allocates them. */
  optimizerBytes: number;
  /** Freed activation/scratch arenas kept for reuse (trimCache() releases them). */
  cachedBytes: number;
}

/** Activations of one forward, kept for its backward. */
export interface NativeHandle {
  dispose(): void;
  readonly disposed: boolean;
  /** Bytes of the activation arena this handle keeps. */
  readonly activationBytes: number;
  /** Transient bytes the forward used besides the kept arena (LM-head chunk). */
  readonly forwardScratchBytes: number;
  /** Transient bytes a backward allocates while it runs. */
  readonly backwardScratchBytes: number;
  readonly numNodes: number;
}

export interface NativeAdamwOptions {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** One byte per tensor (layout order): 1 = apply weight decay. */
  decayMask: Uint8Array;
}

export interface NativeModel {
  layout(): NativeTensorLayout[];
  /**
   * One ArrayBuffer per tensor (layout order) over the parameter and gradient arenas, shared
   * without copy (each co-owns its arena). Per tensor because Node 20 cannot view a whole arena of
   * a >1B-parameter model (over 4 GiB) as one external ArrayBuffer.
   */
  tensorBuffers(): { params: ArrayBuffer[]; grads: ArrayBuffer[] };
  initRandom(seed: number, std: number): void;
  /**
   * Writes logp/entropy in place and resolves with the handle. maxTokens/maxBytes: 0 = no limit.
   * logitsMode: 0 auto, 1 keep the LM-head logits for the backward, 2 recompute them there.
   */
  forward(
    tokens: Int32Array,
    parents: Int32Array,
    logp: Float32Array,
    entropy: Float32Array,
    maxTokens: number,
    maxBytes: number,
    logitsMode: 0 | 1 | 2,
  ): Promise<NativeHandle>;
  backward(handle: NativeHandle, dLdlogp: Float32Array, dLdEntropy?: Float32Array | null): Promise<void>;
  zeroGrad(): Promise<number>;
  gradNorm(): Promise<number>;
  clipGradNorm(maxNorm: number): Promise<number>;
  /** Resolves with the new step count. */
  adamwStep(options: NativeAdamwOptions): Promise<number>;
  memory(): NativeMemory;
  stepCount(): number;
  optimizerState(): { step: number; m: Float32Array | null; v: Float32Array | null };
  setOptimizerState(step: number, m: Float32Array, v: Float32Array): void;
  trimCache(): void;
  /** CUDA build: uploads the host arena (what JavaScript wrote) to the device. CPU build: no-op. */
  pushParams(): Promise<number>;
  /** CUDA build: copies the device weights into the host arena. CPU build: no-op. */
  pullParams(): Promise<number>;
  /** CUDA build: copies the device gradients into the host grads arena. CPU build: no-op. */
  pullGrads(): Promise<number>;
  dispose(): void;
}

/** One batched generation step's results, one entry per sequence id passed to step(). */
export interface NativeStepResult {
  tokens: Int32Array;
  /** Log-prob of each sampled token under the processed distribution it was drawn from (raw when greedy). */
  logprobs: Float32Array;
  /** Log-prob of each sampled token under the policy itself (softmax of the raw logits). */
  rawLogprobs: Float32Array;
  /**
   * Present when some sequence asked for top log-probs: row b of the [B, topK] arrays holds
   * topCounts[b] alternatives (policy log-probs, most likely first).
   */
  topK?: number;
  topCounts?: Int32Array;
  topIds?: Int32Array;
  topLogprobs?: Float32Array;
}

export interface NativeGeneratorStats {
  activeSequences: number;
  prefixCacheHitTokens: number;
  prefixCacheLookupTokens: number;
  prefixCacheBytes: number;
  prefixCacheEntries: number;
}

/**
 * KV-cached generation over one model (native/generate.cc; in the CUDA build native/cuda/generate_cuda.cu:
 * paged KV cache on the device, prefix cache of whole 16-token blocks). add/remove/clearCache must not be
 * called while a step() is in flight (the TypeScript scheduler serialises them).
 */
export interface NativeGenerator {
  /** Registers a sequence; resolves nothing, returns the prompt tokens reused from the prefix cache. */
  add(id: number, prompt: Int32Array, temperature: number, topP: number, topK: number, seed: number, topLogprobs?: number): number;
  /** Drops a sequence; keep = store its KV in the prefix cache. */
  remove(id: number, keep: boolean): void;
  /** Runs pending prompt tokens / the last sampled token of each sequence and samples one token each. */
  step(ids: number[]): Promise<NativeStepResult>;
  clearCache(): void;
  stats(): NativeGeneratorStats;
}

export interface NativeTreeInfo {
  depth: Int32Array;
  pre: Int32Array;
  end: Int32Array;
  order: Int32Array;
  internal: Int32Array;
  maxDepth: number;
  sumPathLength: number;
}

export interface NativeDeviceInfo {
  ok: boolean;
  /** Why the device cannot be used (when !ok). */
  why: string;
  name: string;
  computeCapability: string;
  multiprocessors: number;
  totalBytes: number;
  driverVersion: number;
  runtimeVersion: number;
}

export interface NativeInfo {
  backend: 'cpu' | 'cuda';
  blas: string;
  threads: number;
  simd: string;
  /** Where generation runs ("cpu", or "cuda (paged KV cache, prefix cache)"). */
  generation: string;
  /** CUDA build only. */
  device?: NativeDeviceInfo;
  /** CUDA build only: the cuBLASLt library opened (or why not). */
  gemm?: string;
}

/** One GPU kernel compared with its CPU reference (CUDA build, checkKernels()). */
export interface NativeKernelCheck {
  name: string;
  maxAbsErr: number;
  maxRef: number;
  atol: number;
  rtol: number;
  failures: number;
  passed: boolean;
  detail: string;
}

export type SgemmMode = 'nt' | 'nn' | 'tn';

export interface NativeAddon {
  NativeModel: new (config: NativeModelConfig) => NativeModel;
  NativeHandle: new () => NativeHandle;
  NativeGenerator: new (model: NativeModel, maxPositions: number, prefixCacheBytes: number) => NativeGenerator;
  setThreads(n: number): void;
  getThreads(): number;
  analyzeTree(parents: Int32Array): NativeTreeInfo;
  /**
   * Times cblas_sgemm for C[M,N]: mode "nt" = A[M,K] @ B[N,K]^T (forward), "nn" = A[M,K] @ B[K,N]
   * (input gradient), "tn" = A[K,M]^T @ B[K,N] accumulated (weight gradient).
   */
  benchSgemm(M: number, N: number, K: number, mode: SgemmMode, minSeconds?: number): Promise<{ seconds: number; gflops: number }>;
  info(): NativeInfo;
  /** CUDA build only: every GPU kernel against the CPU reference on random inputs. */
  checkKernels?(seed?: number): Promise<NativeKernelCheck[]>;
  /** CUDA build only: times a cuBLASLt bf16 GEMM C[M,N] = A[M,K] B[N,K]^T. */
  benchGemmBf16?(M: number, N: number, K: number, minSeconds?: number): Promise<{ seconds: number; tflops: number }>;
  /**
   * CUDA build only: seconds of one tree-attention forward (or backward) over `seqs` causal chains
   * totalling N nodes; impl 0 = default dispatch, 1 = the wmma kernels, 2 = the FA2 kernels.
   */
  benchAttention?(impl: 0 | 1 | 2, N: number, H: number, KVH: number, D: number, seqs: number, backward: boolean): Promise<number>;
  /**
   * CUDA build only: decode throughput of the GPU generator on a random model of this shape. `batch`
   * sequences of `promptLen` random tokens are prefilled in one step, then `steps` decode steps run
   * (the first is a warm-up, the others are timed); sampling at `temperature` (default 1, 0 = greedy).
   */
  benchDecodeCuda?(
    config: NativeDecodeBenchConfig,
    batch: number,
    promptLen: number,
    steps: number,
    temperature?: number,
  ): Promise<NativeDecodeBench>;
}

/** Model shape for benchDecodeCuda (random weights). */
export interface NativeDecodeBenchConfig {
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  /** At most 256 (the paged attention kernel's limit). */
  headDim: number;
  qkvBias?: boolean;
  tieWordEmbeddings?: boolean;
  /** Default 1e6. */
  ropeTheta?: number;
  /** Default 1e-6. */
  rmsNormEps?: number;
}

export interface NativeDecodeBench {
  /** batch * timed steps / decode seconds. */
  tokensPerSecond: number;
  /** Mean wall time of one timed decode step (device forward, logits to the host, sampling). */
  stepMs: number;
  decodeSeconds: number;
  /** The first step: prefill of every prompt. */
  prefillSeconds: number;
  /** Device bytes of the KV pool. */
  kvPoolBytes: number;
  batch: number;
  promptLen: number;
  steps: number;
}
