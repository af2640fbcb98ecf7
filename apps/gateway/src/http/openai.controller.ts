import { Controller, Get, Inject, Param, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from '@anvil/observability';
import { ApiError, LOGGER } from '@anvil/service-kit';
import type { SessionAuthenticator } from '../auth/session-auth';
import type { CallService, ChoiceResult } from '../chat/call-service';
import type { PreparedCall } from '../chat/prepared-call';
import type { GatewayConfig } from '../config';
import { GatewayError } from '../errors';
import type { InFlightCalls } from '../lifecycle/in-flight';
import type { GatewayMetrics } from '../metrics';
import type { ModelRegistry } from '../models/model-registry';
import { chatCompletion, textCompletion } from '../openai/chat-response';
import { openChatStream } from '../sse/chat-sse';
import { openCompletionStream } from '../sse/completion-sse';
import type { CallStream } from '../sse/sse-stream';
import { CALL_SERVICE, GATEWAY_CONFIG, GATEWAY_METRICS, IN_FLIGHT, MODEL_REGISTRY, SESSION_AUTH } from '../tokens';
import { gatewayErrorOptions, toHttpError } from './http-errors';

/** Every agent route exists twice: under /v1 (key in `Authorization: Bearer`) and under the per-session base URL /sessions/<key>/v1. */
const routes = (path: string) => [`v1/${path}`, `sessions/:sessionKey/v1/${path}`];

/**
 * The agent-facing OpenAI API: POST chat/completions (JSON or SSE; tools, n, stop, logprobs and
 * top_logprobs), POST completions (JSON or SSE; logprobs: k), GET models. The call itself is
 * CallService.answer (recorded durably before the answer); this layer only shapes its result
 * as JSON or as a stream, and its failures as OpenAI error bodies.
 */
@Controller()
export class OpenAiController {
  private readonly errorOptions;

  constructor(
    @Inject(SESSION_AUTH) private readonly auth: SessionAuthenticator,
    @Inject(CALL_SERVICE) private readonly calls: CallService,
    @Inject(MODEL_REGISTRY) private readonly registry: ModelRegistry,
    @Inject(IN_FLIGHT) private readonly inFlight: InFlightCalls,
    @Inject(GATEWAY_METRICS) private readonly metrics: GatewayMetrics,
    @Inject(GATEWAY_CONFIG) config: GatewayConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.errorOptions = gatewayErrorOptions(config.MAX_REQUEST_BYTES);
  }

  /**
   * The served model needs no session key under /v1 (its name is no secret, and whoever sets up
   * a rollout must learn it before any session exists); under a per-session URL the key is
   * checked as for every call.
   */
  @Get(routes('models'))
  async models(@Req() req: FastifyRequest, @Param('sessionKey') sessionKey?: string) {
    if (sessionKey !== undefined) await this.auth.authenticate(req.headers.authorization, sessionKey);
    return {
      object: 'list',
      data: this.registry
        .list()
        .map((m) => ({ id: m.name, object: 'model', created: m.created, owned_by: 'anvil', max_model_len: m.maxContextTokens })),
    };
  }

  @Get(routes('models/:model'))
  async model(@Req() req: FastifyRequest, @Param('model') name: string, @Param('sessionKey') sessionKey?: string) {
    if (sessionKey !== undefined) await this.auth.authenticate(req.headers.authorization, sessionKey);
    const m = this.registry.get(name);
    if (!m) throw GatewayError.modelNotFound(name);
    return { id: m.name, object: 'model', created: m.created, owned_by: 'anvil', max_model_len: m.maxContextTokens };
  }

  @Post(routes('chat/completions'))
  async chat(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('sessionKey') sessionKey?: string): Promise<void> {
    await this.answer(req, reply, sessionKey, 'chat');
  }

  @Post(routes('completions'))
  async completions(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('sessionKey') sessionKey?: string): Promise<void> {
    await this.answer(req, reply, sessionKey, 'completion');
  }

  private async answer(
    req: FastifyRequest,
    reply: FastifyReply,
    sessionKey: string | undefined,
    kind: 'chat' | 'completion',
  ): Promise<void> {
    const receivedAt = Date.now();
    const release = this.inFlight.enter();
    if (!release)
      return this.fail(
        reply,
        toHttpError(new GatewayError('unavailable', 'the gateway is shutting down; retry', 'shutting_down'), this.errorOptions),
      );
    this.metrics.inFlight.inc();
    // The agent hanging up aborts its generation (nothing is answered, so nothing is recorded).
    const gone = new AbortController();
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) gone.abort();
    });
    let stream: CallStream | null = null;
    try {
      const { call, choices } = await this.calls.answer(
        { kind, body: req.body, authorization: req.headers.authorization, sessionKey, receivedAt, signal: gone.signal },
        {
          prepared: (prepared) => {
            if (!prepared.stream) return;
            stream = (kind === 'chat' ? openChatStream : openCompletionStream)(prepared, reply, captureHeaders(prepared));
            return (index, text) => stream?.text(index, text);
          },
        },
      );
      this.metrics.callSeconds.observe({ route: kind, stream: String(call.stream) }, (Date.now() - receivedAt) / 1000);
      if (stream) return (stream as CallStream).finish(choices);
      if (gone.signal.aborted) return; // recorded, but nobody is listening any more
      void reply
        .status(200)
        .headers({ ...captureHeaders(call), ...toolCallIssueHeader(choices) })
        .send(kind === 'chat' ? chatCompletion(call, choices) : textCompletion(call, choices));
    } catch (err) {
      const error = this.toError(err);
      if (stream) (stream as CallStream).fail(error);
      else this.fail(reply, error);
    } finally {
      this.metrics.inFlight.dec();
      release();
    }
  }

  private toError(err: unknown): ApiError {
    const e = toHttpError(err, this.errorOptions);
    if (e.status >= 500 && !(err instanceof GatewayError)) this.logger.error('call failed', { err });
    return e;
  }

  private fail(reply: FastifyReply, error: ApiError): void {
    if (reply.sent || reply.raw.headersSent || reply.raw.destroyed) return;
    void reply.status(error.status).headers(error.headers).send(error.body());
  }
}

/** Where the call landed in the capture, for agents' and tests' bookkeeping (never a secret). */
const captureHeaders = (call: PreparedCall): Record<string, string> => ({
  'x-anvil-call-ids': call.callIds.join(','),
  'x-anvil-branch-id': call.branchId,
  'x-anvil-capture': call.plan.parent ? `extend:${call.plan.parent.callId}` : `branch:${call.plan.branchCause}`,
});

function toolCallIssueHeader(choices: ChoiceResult[]): Record<string, string> {
  const issue = choices.find((c) => c.reply?.toolCallIssue)?.reply?.toolCallIssue;
  return issue ? { 'x-anvil-tool-call-issue': issue.replace(/[^\x20-\x7e]/g, '?').slice(0, 300) } : {};
}
