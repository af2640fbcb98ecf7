import type { GenerateGrammarNode } from '@anvil/contracts';

/**
 * What the proxy needs from an inference engine. Three implementations: the embedded native
 * engine (embedded-backend.ts), vLLM over its OpenAI-compatible completions API
 * (vllm-backend.ts) and SGLang over its native /generate (sglang-backend.ts). The router
 * treats them alike; only their weight-update mechanics and logprob semantics differ, and each
 * documents both.
 */

export interface SamplingParams {
  maxTokens: number;
  temperature: number;
  topP: number;
  /** 0 = disabled. */
  topK: number;
  seed: number | null;
  /** Generation stops after sampling one of these; the stop token is part of the output. */
  stopIds: number[];
  /** Alternatives to return per sampled token (0 = none). Backends that cannot give them refuse k > 0 (BackendRequestError 400). */
  topLogprobs?: number;
}

/** The k most likely tokens at one output position, most likely first. */
export interface TopLogprobs {
  ids: number[];
  logprobs: number[];
}

/** Constrained decoding of one attempt: the request's grammar, and the tokens earlier attempts already generated under it. */
export interface BackendConstraint {
  grammar: GenerateGrammarNode;
  /** Output of earlier attempts (at the end of promptIds): the grammar continues after them. */
  generatedIds: number[];
}

export interface BackendGenerateRequest {
  /** Unique per attempt (a resumed generation gets a new one): backends abort by it. */
  requestId: string;
  promptIds: number[];
  sampling: SamplingParams;
  /** Constrained decoding: every token keeps the output within the grammar; a stop id ends it once complete. */
  constraint?: BackendConstraint;
}

/** Tokens sampled since the previous chunk. */
export interface TokenChunk {
  ids: number[];
  logprobs: number[];
  /** One entry per id when the request asked for topLogprobs. */
  topLogprobs?: TopLogprobs[];
  /** With a constraint: one TOKEN_CONSTRAINT mark per id (1 within a mask, 2 forced). */
  constrained?: number[];
}

export type FinishReason = 'stop' | 'length' | 'abort';

export interface BackendResult {
  outputIds: number[];
  /**
   * Log-prob of each sampled token under the distribution it was sampled from. What that
   * means exactly depends on the engine and its flags: see each backend's header comment.
   */
  logprobs: number[];
  /** 'abort' when `signal` fired: outputIds then holds what was produced before it. */
  finishReason: FinishReason;
  /** Prompt tokens served from the engine's prefix cache (0 when it does not say). */
  cachedPromptTokens: number;
  /** One entry per output id when the request asked for topLogprobs. */
  topLogprobs?: TopLogprobs[];
  /** With a constraint: one TOKEN_CONSTRAINT mark per output id. */
  constrained?: number[];
}

export interface BackendGenerateOptions {
  /** Aborting stops the generation at the next token boundary; generate() then resolves with 'abort'. */
  signal?: AbortSignal;
  /** Called as tokens arrive, in order, before generate() resolves. */
  onTokens?: (chunk: TokenChunk) => void;
}

export interface BackendHealth {
  ok: boolean;
  detail?: string;
}

export interface LoadWeightsRequest {
  version: number;
  /**
   * A path the engine can read: a Hugging Face model (config.json + safetensors), or with
   * weights 'lora-adapter' a PEFT LoRA adapter directory to apply to `base`.
   */
  checkpointUri: string;
  /** What checkpointUri holds (weights.published v2); absent: a whole model. */
  weights?: 'full' | 'lora-adapter';
  /** The base a LoRA adapter applies to: its Hugging Face directory and the engine fingerprint of its weights. */
  base?: { checkpointUri: string; fingerprint: string };
}

export interface InferenceBackend {
  /** Stable replica id (its URL for external engines). */
  readonly id: string;
  readonly kind: 'embedded' | 'vllm' | 'sglang';
  /** Generations currently running on this backend through this proxy. */
  readonly inFlight: number;
  /** What it serves, for logs and GET /internal/v1/replicas: a checkpoint directory, a served model name, or the built-in tiny model. */
  readonly model: string;
  /**
   * Token ids the served model has (its vocab_size), which the gateway compares with its
   * tokenizer's; null when the engine does not report it (vLLM and SGLang do not).
   */
  readonly vocabSize: number | null;
  /**
   * Whether a constrained generation can continue on it after tokens generated elsewhere
   * (`constraint.generatedIds` non-empty). The embedded engine replays them through the grammar;
   * vLLM and SGLang compile the grammar from its start, so a constrained call on them is not
   * resumed (the proxy lets it finish across a weight swap, and ends it with 'abort' when its
   * replica fails mid-call).
   */
  readonly resumesConstraints?: boolean;
  /**
   * Runs one generation. Rejects with BackendUnavailableError when the engine cannot be
   * reached or the stream breaks (tokens already passed to onTokens stay valid: the router
   * resumes from them elsewhere), with BackendRequestError when the engine refuses the request.
   */
  generate(req: BackendGenerateRequest, opts?: BackendGenerateOptions): Promise<BackendResult>;
  health(): Promise<BackendHealth>;
  /** Replaces the weights; resolves once generations started afterwards use them. */
  loadWeights(req: LoadWeightsRequest): Promise<void>;
  /** Aborts every generation this proxy runs on the backend (each resolves with 'abort'). */
  abortAll(): Promise<void>;
  close?(): Promise<void>;
}

/** The engine could not be reached or broke off: another replica may serve the request. */
export class BackendUnavailableError extends Error {
  override readonly name = 'BackendUnavailableError';
  constructor(
    readonly backendId: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${backendId}: ${message}`, options);
  }
}

/** The engine refused the request itself (4xx): retrying elsewhere would fail the same way. */
export class BackendRequestError extends Error {
  override readonly name = 'BackendRequestError';
  constructor(
    readonly backendId: string,
    readonly status: number,
    message: string,
  ) {
    super(`${backendId}: ${message}`);
  }
}
