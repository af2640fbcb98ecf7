import { context, propagation } from '@opentelemetry/api';
import { Agent, request, type Dispatcher } from 'undici';
import {
  apiErrorBodySchema,
  type ApiErrorBody,
  type GenerateRequestInput,
  type GenerateResponse,
  type GenerateTokenChunk,
} from '@anvil/contracts';
import { parseGenerateResponse, parseStreamLine } from './wire';

export interface InferenceProxyClientOptions {
  /** e.g. http://inference-proxy:8081 */
  baseUrl: string;
  /** Per-call deadline for the whole generation (default: none besides the caller's signal). */
  timeoutMs?: number;
  /** The connection pool (default: a keep-alive undici Agent of this client's own). */
  dispatcher?: Dispatcher;
}

/** A non-2xx answer (or an error line in a stream), with the OpenAI-style body. */
export class InferenceProxyError extends Error {
  override readonly name = 'InferenceProxyError';
  constructor(
    readonly status: number,
    readonly body: ApiErrorBody,
  ) {
    super(`inference-proxy ${status}: ${body.error.message}`);
  }

  get code(): string | null {
    return this.body.error.code;
  }
}

export interface ReplicasReport {
  deployment: string | null;
  policyVersion?: number;
  swapPolicy?: string;
  swapping?: boolean;
  replicas: {
    id: string;
    healthy: boolean;
    routable: boolean;
    inFlight: number;
    weightsVersion: number | null;
    prefixCacheHitRate: number;
    /** What the replica serves (checkpoint directory, model name, or the built-in tiny model). */
    model?: string;
    /** Token ids of the served model; null when the engine does not report it. */
    vocabSize?: number | null;
    [k: string]: unknown;
  }[];
  [k: string]: unknown;
}

type ResponseBody = Dispatcher.ResponseData['body'];

/** Connection errors that mean a kept-alive connection was closed by the server before it read the request. */
const STALE_CONNECTION = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE']);

/**
 * What the gateway uses to call the inference-proxy: ids in, ids + logprobs + per-token policy
 * versions out. Calls go over pooled keep-alive connections (undici), and answers are checked
 * by hand-written shape checks (wire.ts) rather than schema parsing: this is the per-call hot
 * path. Aborting the signal closes the connection, which aborts the generation (and the
 * engine's) on the proxy.
 */
export class InferenceProxyClient {
  private readonly baseUrl: string;
  private readonly dispatcher: Dispatcher;
  private readonly ownsDispatcher: boolean;

  constructor(private readonly options: InferenceProxyClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.ownsDispatcher = !options.dispatcher;
    // No undici timeouts of its own: a non-streamed generation sends its headers only when it
    // is done, so the deadline is timeoutMs (or the caller's signal), not headersTimeout.
    this.dispatcher = options.dispatcher ?? new Agent({ keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0 });
  }

  /** One generation, answered when it finishes (one JSON body: the cheapest way when nothing needs the tokens early). */
  async generate(req: GenerateRequestInput, opts: { signal?: AbortSignal } = {}): Promise<GenerateResponse> {
    const { body, done } = await this.post('/internal/v1/generate', { ...req, stream: false }, opts.signal);
    try {
      return parseGenerateResponse(JSON.parse(await body.text()));
    } finally {
      done();
    }
  }

  /**
   * Streams the generation: token chunks as they are sampled, then the final response. The
   * iterator's `return` value is the response; `collect` below is the usual way to get both.
   * Leaving the loop early (return or throw) closes the connection, which aborts the generation.
   */
  async *generateStream(
    req: GenerateRequestInput,
    opts: { signal?: AbortSignal } = {},
  ): AsyncGenerator<GenerateTokenChunk, GenerateResponse> {
    const { body, done } = await this.post('/internal/v1/generate', { ...req, stream: true }, opts.signal);
    try {
      body.setEncoding('utf8');
      let buffer = '';
      let response: GenerateResponse | undefined;
      // The body is read to its end (the proxy ends it after the final line): leaving it early
      // would destroy the connection instead of returning it to the pool.
      for await (const piece of body as AsyncIterable<string>) {
        buffer += piece;
        let nl: number;
        while ((nl = buffer.indexOf('\n')) >= 0) {
          const text = buffer.slice(0, nl);
          buffer = buffer.slice(nl + 1);
          if (!text.trim() || response) continue;
          const line = parseStreamLine(JSON.parse(text));
          if (line.type === 'tokens') yield line;
          else if (line.type === 'done') response = line.response;
          else throw new InferenceProxyError(502, { error: line.error });
        }
      }
      if (!response) throw new Error('inference-proxy stream ended without a final line');
      return response;
    } finally {
      if (!body.readableEnded) body.destroy();
      done();
    }
  }

  /** Streams, calling onChunk per chunk, and resolves with the final response. */
  async collect(
    req: GenerateRequestInput,
    opts: { signal?: AbortSignal; onChunk?: (chunk: GenerateTokenChunk) => void } = {},
  ): Promise<GenerateResponse> {
    const it = this.generateStream(req, opts);
    for (;;) {
      const next = await it.next();
      if (next.done) return next.value;
      opts.onChunk?.(next.value);
    }
  }

  async replicas(opts: { signal?: AbortSignal } = {}): Promise<ReplicasReport> {
    const { signal, done } = this.signal(opts.signal);
    try {
      const res = await request(`${this.baseUrl}/internal/v1/replicas`, { dispatcher: this.dispatcher, signal });
      if (res.statusCode < 200 || res.statusCode >= 300) throw await this.error(res.statusCode, res.body);
      return (await res.body.json()) as ReplicasReport;
    } finally {
      done();
    }
  }

  /** Closes the pooled connections (only those of a dispatcher this client made). */
  async close(): Promise<void> {
    if (this.ownsDispatcher) await this.dispatcher.close();
  }

  /** POSTs JSON; a 2xx answer's body with the function to call once it has been read (clears the deadline). */
  private async post(path: string, body: unknown, callerSignal?: AbortSignal): Promise<{ body: ResponseBody; done(): void }> {
    const { signal, done } = this.signal(callerSignal);
    const payload = JSON.stringify(body);
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    // undici is not instrumented: the caller's trace (when there is one) goes on by hand.
    propagation.inject(context.active(), headers);
    const send = () => request(`${this.baseUrl}${path}`, { method: 'POST', headers, body: payload, signal, dispatcher: this.dispatcher });
    try {
      let res: Dispatcher.ResponseData;
      try {
        res = await send();
      } catch (err) {
        // A pooled connection the proxy closed as we sent on it (keep-alive race): nothing was
        // answered, so nothing ran there; once more on a fresh connection.
        if (signal?.aborted || !STALE_CONNECTION.has((err as { code?: string }).code ?? '')) throw err;
        res = await send();
      }
      if (res.statusCode < 200 || res.statusCode >= 300) throw await this.error(res.statusCode, res.body);
      return { body: res.body, done };
    } catch (err) {
      done();
      throw err;
    }
  }

  /** The caller's signal, cut off at timeoutMs (without AbortSignal.any/timeout: this runs on every call). */
  private signal(signal?: AbortSignal): { signal: AbortSignal | undefined; done(): void } {
    const timeoutMs = this.options.timeoutMs;
    if (!timeoutMs || signal?.aborted) return { signal, done: () => undefined };
    const controller = new AbortController();
    const forward = () => controller.abort(signal?.reason);
    signal?.addEventListener('abort', forward, { once: true });
    const timer = setTimeout(() => controller.abort(new Error(`inference-proxy call exceeded ${timeoutMs} ms`)), timeoutMs);
    timer.unref();
    return {
      signal: controller.signal,
      done: () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', forward);
      },
    };
  }

  private async error(status: number, res: ResponseBody): Promise<InferenceProxyError> {
    const text = await res.text().catch(() => '');
    let body: ApiErrorBody;
    try {
      body = apiErrorBodySchema.parse(JSON.parse(text));
    } catch {
      body = { error: { message: text.slice(0, 500) || `HTTP ${status}`, type: 'server_error', param: null, code: null } };
    }
    return new InferenceProxyError(status, body);
  }
}
