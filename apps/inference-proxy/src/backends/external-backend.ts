import {
  BackendUnavailableError,
  type BackendGenerateOptions,
  type BackendGenerateRequest,
  type BackendHealth,
  type BackendResult,
  type FinishReason,
  type InferenceBackend,
  type LoadWeightsRequest,
  type TopLogprobs,
} from './backend';
import { openStream, readSse, trimSlash } from './http-stream';
import { TOKEN_CONSTRAINT, type GenerateGrammarNode } from '@anvil/contracts';
import { toEbnf } from '@anvil/guided-decoding';
import { BackendRequestError } from './backend';

export interface ExternalBackendOptions {
  /** Base URL of the engine's HTTP server, e.g. http://10.0.0.5:8000 */
  url: string;
  /** Deadline for control calls (health, weight loads, aborts). */
  controlTimeoutMs?: number;
  /** Deadline for a weight load (reading a checkpoint takes a while). */
  loadTimeoutMs?: number;
  /** The served model's name, when it was configured (vLLM's INFERENCE_MODEL). */
  model?: string;
}

/** What one parsed stream event contributes. */
export interface StreamStep {
  ids: number[];
  logprobs: number[];
  /** One entry per id when the request asked for alternatives. */
  topLogprobs?: TopLogprobs[];
  finishReason?: FinishReason;
  cachedPromptTokens?: number;
}

/** Per-request parsing state. */
export interface StreamState {
  /** Tokens received so far. */
  received: number;
  /** The request asked for top logprobs (k > 0). */
  readonly wantTop: boolean;
}

/**
 * The streaming loop both HTTP engines share: open the SSE stream, turn each event into
 * tokens (subclasses know the wire format), hand them on, and stop at a token boundary when
 * aborted. Aborting closes the connection (both engines abort a request whose client left);
 * subclasses may also tell the engine explicitly (onAbort).
 */
export abstract class ExternalBackend implements InferenceBackend {
  abstract readonly kind: 'vllm' | 'sglang';
  readonly id: string;
  /** The engine's model as it was named to the proxy (INFERENCE_MODEL), else its URL. */
  readonly model: string;
  /** Neither engine reports its vocabulary size over its serving API. */
  readonly vocabSize = null;
  /** Both compile a grammar from its start (see InferenceBackend.resumesConstraints). */
  readonly resumesConstraints = false;
  protected readonly baseUrl: string;
  protected readonly controlTimeoutMs: number;
  protected readonly loadTimeoutMs: number;
  private readonly running = new Map<string, AbortController>();

  constructor(opts: ExternalBackendOptions) {
    this.baseUrl = trimSlash(opts.url);
    this.id = this.baseUrl;
    this.model = opts.model ?? this.baseUrl;
    this.controlTimeoutMs = opts.controlTimeoutMs ?? 5_000;
    this.loadTimeoutMs = opts.loadTimeoutMs ?? 600_000;
  }

  get inFlight(): number {
    return this.running.size;
  }

  protected abstract streamPath: string;
  /** `grammar`: the constraint as xgrammar EBNF (see toEbnf), null without one. */
  protected abstract requestBody(req: BackendGenerateRequest, grammar: string | null): unknown;
  /**
   * Parses one `data:` payload; `state` is per request (`received` for cumulative formats;
   * `wantTop`: whether the request asked for alternatives, so they need not be parsed otherwise).
   */
  protected abstract parseEvent(data: unknown, state: StreamState): StreamStep;
  /** Called (fire-and-forget) after the connection of an aborted request was closed. */
  protected onAbort(_requestId: string): Promise<void> {
    return Promise.resolve();
  }
  abstract health(): Promise<BackendHealth>;
  abstract loadWeights(req: LoadWeightsRequest): Promise<void>;

  async generate(req: BackendGenerateRequest, opts: BackendGenerateOptions = {}): Promise<BackendResult> {
    const outputIds: number[] = [];
    const logprobs: number[] = [];
    const wantTop = (req.sampling.topLogprobs ?? 0) > 0;
    const topLogprobs: TopLogprobs[] = [];
    const grammar = req.constraint ? this.grammar(req.constraint.grammar, req.constraint.generatedIds) : null;
    let cachedPromptTokens = 0;
    // The engine enforces the grammar but does not say how many ids each mask allowed: every token is marked constrained.
    const marks = (n: number) => Array.from({ length: n }, () => TOKEN_CONSTRAINT.constrained as number);
    const result = (finishReason: FinishReason): BackendResult => ({
      outputIds,
      logprobs,
      finishReason,
      cachedPromptTokens,
      ...(wantTop ? { topLogprobs } : {}),
      ...(grammar !== null ? { constrained: marks(outputIds.length) } : {}),
    });
    const aborted = (): BackendResult => result('abort');
    if (opts.signal?.aborted) return aborted();

    const controller = new AbortController();
    const forward = () => controller.abort();
    opts.signal?.addEventListener('abort', forward, { once: true });
    this.running.set(req.requestId, controller);
    try {
      const body = await openStream(this.id, `${this.baseUrl}${this.streamPath}`, this.requestBody(req, grammar), controller.signal);
      const state: StreamState = { received: 0, wantTop };
      let finishReason: FinishReason | undefined;
      // Read to the end of the response even after [DONE] (the server ends it there): leaving a
      // body early destroys it, which costs an error object and the keep-alive connection.
      let done = false;
      await readSse(body, (data) => {
        if (done || data === '[DONE]') {
          done = true;
          return;
        }
        const step = this.parseEvent(JSON.parse(data), state);
        if (step.cachedPromptTokens !== undefined) cachedPromptTokens = step.cachedPromptTokens;
        if (step.ids.length) {
          state.received += step.ids.length;
          pushAll(outputIds, step.ids);
          pushAll(logprobs, step.logprobs);
          if (wantTop) {
            if (step.topLogprobs?.length !== step.ids.length)
              throw new BackendUnavailableError(
                this.id,
                `asked for top logprobs, got ${step.topLogprobs?.length ?? 0} entries for ${step.ids.length} tokens`,
              );
            pushAll(topLogprobs, step.topLogprobs);
          }
          opts.onTokens?.({
            ids: step.ids,
            logprobs: step.logprobs,
            ...(wantTop ? { topLogprobs: step.topLogprobs } : {}),
            ...(grammar !== null ? { constrained: marks(step.ids.length) } : {}),
          });
        }
        if (step.finishReason) finishReason = step.finishReason;
      });
      if (!finishReason)
        throw new BackendUnavailableError(this.id, `stream ended after ${outputIds.length} tokens without a finish reason`);
      return result(finishReason);
    } catch (err) {
      if (controller.signal.aborted) {
        void this.onAbort(req.requestId).catch(() => undefined);
        return aborted();
      }
      if (err instanceof Error && (err.name === 'BackendUnavailableError' || err.name === 'BackendRequestError')) throw err;
      throw new BackendUnavailableError(this.id, `stream broke after ${outputIds.length} tokens: ${(err as Error).message}`, {
        cause: err,
      });
    } finally {
      opts.signal?.removeEventListener('abort', forward);
      this.running.delete(req.requestId);
    }
  }

  /** The constraint as EBNF (cached per grammar); a grammar that cannot be enforced, or a resumption, is a 400. */
  private grammar(node: GenerateGrammarNode, generatedIds: readonly number[]): string {
    if (generatedIds.length > 0)
      throw new BackendRequestError(
        this.id,
        400,
        'a constrained generation cannot be resumed here: the engine compiles its grammar from the start',
      );
    const key = JSON.stringify(node);
    let text = ebnfCache.get(key);
    if (text === undefined) {
      try {
        text = toEbnf(node);
      } catch (err) {
        throw new BackendRequestError(this.id, 400, `constrained decoding: ${(err as Error).message}`);
      }
      ebnfCache.set(key, text);
      if (ebnfCache.size > 64) ebnfCache.delete(ebnfCache.keys().next().value as string);
    }
    return text;
  }

  async abortAll(): Promise<void> {
    for (const controller of this.running.values()) controller.abort();
  }

  protected async getOk(path: string): Promise<BackendHealth> {
    try {
      const res = await fetch(`${this.baseUrl}${path}`, { signal: AbortSignal.timeout(this.controlTimeoutMs) });
      await res.arrayBuffer();
      return res.ok ? { ok: true } : { ok: false, detail: `GET ${path} answered ${res.status}` };
    } catch (err) {
      return { ok: false, detail: `GET ${path} failed: ${(err as Error).message}` };
    }
  }
}

/** EBNF of recent grammars (the calls of a rollout group share their tools). */
const ebnfCache = new Map<string, string>();

/** Appends `items` without spreading them into arguments (a chunk is usually one token). */
function pushAll<T>(target: T[], items: readonly T[]): void {
  for (let i = 0; i < items.length; i++) target.push(items[i]);
}
