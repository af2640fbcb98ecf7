import { Body, Controller, Get, HttpCode, Inject, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { GenerateStreamLine } from '@anvil/contracts';
import type { Logger } from '@anvil/observability';
import { ApiError, LOGGER } from '@anvil/service-kit';
import type { RuntimeHandle } from '../runtime.provider';
import { RequestStop } from '../generation/request-stop';
import { INFERENCE_RUNTIME } from '../tokens';
import { generationApiError } from './http-errors';
import { parseGenerateRequest } from './generate-request';

/**
 * The token-level internal API the gateway calls.
 *  POST /internal/v1/generate  JSON GenerateRequest -> GenerateResponse, or with `stream: true`
 *                              NDJSON lines: {type:'tokens', ids, logprobs, versions}... then
 *                              {type:'done', response} (or {type:'error', error}).
 *  GET  /internal/v1/replicas  per-replica health, load, weights and prefix-cache hits.
 * A client that disconnects aborts its generation (and the engine's).
 */
@Controller('internal/v1')
export class GenerateController {
  constructor(
    @Inject(INFERENCE_RUNTIME) private readonly handle: RuntimeHandle,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  @Post('generate')
  async generate(@Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    const parsed = parseGenerateRequest(body ?? undefined);
    if (!parsed.success) return this.fail(reply, ApiError.fromZod(parsed.error));
    const runtime = this.handle.runtime;
    if (!runtime) return this.fail(reply, ApiError.unavailable(this.handle.unavailable ?? 'no inference backend', 'backend_unavailable'));
    const req = parsed.data;

    // The response's socket closing before we finished = the client went away: stop the
    // generation (a RequestStop, not an AbortController: see request-stop.ts).
    const stop = new RequestStop();
    let clientGone = false;
    reply.raw.on('close', () => {
      if (reply.raw.writableFinished) return;
      clientGone = true;
      stop.abort();
    });

    if (!req.stream) {
      try {
        const response = await runtime.generation.generate(req, { stop });
        if (!clientGone) await reply.status(200).send(response);
      } catch (err) {
        this.fail(reply, generationApiError(err));
      }
      return;
    }

    // Streaming: the first line goes out only once the generation runs, so a request that
    // cannot be placed still gets a proper status code instead of a 200 with an error line.
    reply.hijack();
    const raw = reply.raw;
    let started = false;
    const write = (line: GenerateStreamLine) => {
      if (!started) {
        raw.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
        started = true;
      }
      if (!raw.destroyed) raw.write(JSON.stringify(line) + '\n');
    };
    try {
      const response = await runtime.generation.generate(req, {
        stop,
        onChunk: (c) =>
          write({
            type: 'tokens',
            ids: c.ids,
            logprobs: c.logprobs,
            versions: c.versions,
            ...(c.topLogprobs ? { topLogprobs: c.topLogprobs } : {}),
            ...(c.constrained ? { constrained: c.constrained } : {}),
          }),
      });
      write({ type: 'done', response });
      raw.end();
    } catch (err) {
      const apiError = generationApiError(err);
      if (!started) {
        raw.writeHead(apiError.status, { 'content-type': 'application/json' });
        raw.end(JSON.stringify(apiError.body()));
        return;
      }
      this.logger.warn('streamed generation failed', { requestId: req.requestId, err });
      write({ type: 'error', error: apiError.body().error });
      raw.end();
    }
  }

  @Get('replicas')
  @HttpCode(200)
  replicas() {
    const runtime = this.handle.runtime;
    if (!runtime) return { deployment: null, unavailable: this.handle.unavailable, replicas: [] };
    return runtime.snapshot();
  }

  private fail(reply: FastifyReply, error: ApiError): void {
    if (reply.sent || reply.raw.headersSent) return;
    void reply.status(error.status).send(error.body());
  }
}
