import {
  apiErrorBodySchema,
  generateResponseSchema,
  generateStreamLineSchema,
  type ApiErrorBody,
  type GenerateRequestInput,
  type GenerateResponse,
  type GenerateStreamLine,
  type GenerateTokenChunk,
} from '@anvil/contracts';

export interface InferenceProxyClientOptions {
  /** e.g. http://inference-proxy:8081 */
  baseUrl: string;
  /** Per-call deadline for the whole generation (default: none besides the caller's signal). */
  timeoutMs?: number;
  fetch?: typeof fetch;
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

  /** Worth retrying later or elsewhere (no replica, shutting down, engine failure). */
  get retryable(): boolean {
    return this.status >= 500;
  }
}

export interface ReplicasReport {
  deployment: string | null;
  policyVersion?: number;
  swapPolicy?: string;
  swapping?: boolean;
  replicas: { id: string; healthy: boolean; routable: boolean; inFlight: number; weightsVersion: number | null; prefixCacheHitRate: number; [k: string]: unknown }[];
  [k: string]: unknown;
}

/**
 * What the gateway uses to call the inference-proxy: ids in, ids + logprobs + per-token policy
 * versions out. Aborting the signal closes the connection, which aborts the generation (and the
 * engine's) on the proxy.
 */
export class InferenceProxyClient {
  private readonly baseUrl: string;
  private readonly fetchImpl: typeof fetch;

  constructor(private readonly options: InferenceProxyClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.fetchImpl = options.fetch ?? fetch;
  }

  /** One generation, answered when it finishes. */
  async generate(req: GenerateRequestInput, opts: { signal?: AbortSignal } = {}): Promise<GenerateResponse> {
    const res = await this.post('/internal/v1/generate', { ...req, stream: false }, opts.signal);
    return generateResponseSchema.parse(await res.json());
  }

  /**
   * Streams the generation: token chunks as they are sampled, then the final response. The
   * iterator's `return` value is the response; `collect` below is the usual way to get both.
   */
  async *generateStream(req: GenerateRequestInput, opts: { signal?: AbortSignal } = {}): AsyncGenerator<GenerateTokenChunk, GenerateResponse> {
    const res = await this.post('/internal/v1/generate', { ...req, stream: true }, opts.signal);
    if (!res.body) throw new Error('inference-proxy answered without a body');
    const decoder = new TextDecoder();
    let buffer = '';
    for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(bytes, { stream: true });
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const text = buffer.slice(0, nl).trim();
        buffer = buffer.slice(nl + 1);
        if (!text) continue;
        const line: GenerateStreamLine = generateStreamLineSchema.parse(JSON.parse(text));
        if (line.type === 'tokens') yield line;
        else if (line.type === 'done') return line.response;
        else throw new InferenceProxyError(502, { error: line.error });
      }
    }
    throw new Error('inference-proxy stream ended without a final line');
  }

  /** Streams, calling onChunk per chunk, and resolves with the final response. */
  async collect(req: GenerateRequestInput, opts: { signal?: AbortSignal; onChunk?: (chunk: GenerateTokenChunk) => void } = {}): Promise<GenerateResponse> {
    const it = this.generateStream(req, opts);
    for (;;) {
      const next = await it.next();
      if (next.done) return next.value;
      opts.onChunk?.(next.value);
    }
  }

  async replicas(opts: { signal?: AbortSignal } = {}): Promise<ReplicasReport> {
    const res = await this.fetchImpl(`${this.baseUrl}/internal/v1/replicas`, { signal: this.signal(opts.signal) });
    if (!res.ok) throw await this.error(res);
    return (await res.json()) as ReplicasReport;
  }

  private async post(path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
    const res = await this.fetchImpl(`${this.baseUrl}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: this.signal(signal),
    });
    if (!res.ok) throw await this.error(res);
    return res;
  }

  private signal(signal?: AbortSignal): AbortSignal | undefined {
    const parts = [signal, this.options.timeoutMs ? AbortSignal.timeout(this.options.timeoutMs) : undefined].filter((s): s is AbortSignal => !!s);
    return parts.length ? AbortSignal.any(parts) : undefined;
  }

  private async error(res: Response): Promise<InferenceProxyError> {
    const text = await res.text().catch(() => '');
    let body: ApiErrorBody;
    try {
      body = apiErrorBodySchema.parse(JSON.parse(text));
    } catch {
      body = { error: { message: text.slice(0, 500) || res.statusText, type: 'server_error', param: null, code: null } };
    }
    return new InferenceProxyError(res.status, body);
  }
}
