import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { GenerateRequest } from '@anvil/contracts';

export interface ScriptedReply {
  ids: number[];
  finishReason?: 'stop' | 'length' | 'abort';
  /** Policy version of every token (default 0). */
  version?: number;
  /** Answer this HTTP error instead. */
  error?: { status: number; message: string };
  /** Constrained-decoding marks per id (default with a constraint: 1 for every id). */
  constrained?: number[];
}

/**
 * A stand-in for the inference-proxy's token API (POST /internal/v1/generate, JSON or NDJSON),
 * answering from a script, for in-process gateway tests: it lets a test decide exactly which ids
 * the "model" samples (a tool call, a stop string) and compare them with what was recorded.
 * The e2e suites use the real built proxy and vLLM fixture instead.
 */
export class FakeInferenceProxy {
  readonly requests: GenerateRequest[] = [];
  private server!: Server;
  url = '';
  tokenDelayMs = 0;
  /** What GET /internal/v1/replicas reports as the served model's vocabulary (the byte tokenizer's by default). */
  vocabSize: number | null = 272;

  constructor(public script: (req: GenerateRequest, n: number) => ScriptedReply) {}

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      if (req.method === 'GET' && req.url === '/internal/v1/replicas') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            deployment: 'fake',
            replicas: [
              {
                id: 'fake',
                healthy: true,
                routable: true,
                inFlight: 0,
                weightsVersion: null,
                prefixCacheHitRate: 0,
                model: 'scripted',
                vocabSize: this.vocabSize,
              },
            ],
          }),
        );
        return;
      }
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => void this.handle(JSON.parse(body) as GenerateRequest, res));
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  private async handle(req: GenerateRequest, res: import('node:http').ServerResponse): Promise<void> {
    this.requests.push(req);
    const reply = this.script(req, this.requests.length - 1);
    if (reply.error) {
      res.writeHead(reply.error.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: reply.error.message, type: 'server_error', param: null, code: null } }));
      return;
    }
    let ids = reply.ids.slice(0, req.maxTokens);
    let finish = reply.finishReason ?? (ids.length < reply.ids.length ? 'length' : 'stop');
    const stopAt = ids.findIndex((id) => req.stopIds.includes(id));
    if (stopAt !== -1) {
      ids = ids.slice(0, stopAt + 1);
      finish = 'stop';
    }
    const version = reply.version ?? 0;
    const logprobs = ids.map((id, i) => -((id * 7 + i) % 50) / 10 - 0.01);
    const versions = ids.map(() => version);
    // Asked for alternatives: the sampled id first, then the next ids, each less likely.
    const k = req.topLogprobs ?? 0;
    const top =
      k > 0
        ? ids.map((id, i) => ({
            ids: Array.from({ length: k }, (_, j) => (id + j) % 272),
            logprobs: Array.from({ length: k }, (_, j) => logprobs[i] - j),
          }))
        : undefined;
    const marks = req.constraint ? (reply.constrained ?? ids.map(() => 1)).slice(0, ids.length) : undefined;
    const response = {
      requestId: req.requestId,
      outputIds: ids,
      logprobs,
      versions,
      finishReason: finish,
      promptTokens: req.promptIds.length,
      cachedPromptTokens: 0,
      replica: 'fake',
      ...(top ? { topLogprobs: top } : {}),
      ...(marks ? { constrained: marks } : {}),
    };
    if (!req.stream) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(response));
      return;
    }
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    for (let i = 0; i < ids.length; i += 3) {
      if (res.destroyed) return;
      res.write(
        JSON.stringify({
          type: 'tokens',
          ids: ids.slice(i, i + 3),
          logprobs: logprobs.slice(i, i + 3),
          versions: versions.slice(i, i + 3),
          ...(top ? { topLogprobs: top.slice(i, i + 3) } : {}),
          ...(marks ? { constrained: marks.slice(i, i + 3) } : {}),
        }) + '\n',
      );
      if (this.tokenDelayMs) await new Promise((r) => setTimeout(r, this.tokenDelayMs));
    }
    res.end(JSON.stringify({ type: 'done', response }) + '\n');
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
