import { Controller, Get, Inject, Param, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from '@anvil/observability';
import { LOGGER } from '@anvil/service-kit';
import type { SessionAuthenticator } from '../auth/session-auth';
import type { CallService, ChatInput, ChoiceResult } from '../chat/call-service';
import type { PreparedCall } from '../chat/prepared-call';
import type { InFlightCalls } from '../lifecycle/in-flight';
import type { GatewayMetrics } from '../metrics';
import type { ModelRegistry } from '../models/model-registry';
import { chatRequestSchema, completionRequestSchema } from '../openai/chat-request';
import { chatCompletion, textCompletion } from '../openai/chat-response';
import { streamChat } from '../sse/chat-sse';
import { streamCompletion } from '../sse/completion-sse';
import { CALL_SERVICE, GATEWAY_METRICS, IN_FLIGHT, MODEL_REGISTRY, SESSION_AUTH } from '../tokens';
import { ApiError } from './api-error';
import { toApiError } from './openai-error.filter';

/** Every agent route exists twice: under /v1 (key in `Authorization: Bearer`) and under the per-session base URL /sessions/<key>/v1. */
const routes = (path: string) => [`v1/${path}`, `sessions/:sessionKey/v1/${path}`];

/**
 * The agent-facing OpenAI API: POST chat/completions (JSON or SSE; tools, n, stop, logprobs and
 * top_logprobs), POST completions (JSON or SSE; logprobs: k), GET models. Every answered call is recorded durably before the answer
 * (see CallService and CallRecorder).
 */
@Controller()
export class OpenAiController {
  constructor(
    @Inject(SESSION_AUTH) private readonly auth: SessionAuthenticator,
    @Inject(CALL_SERVICE) private readonly calls: CallService,
    @Inject(MODEL_REGISTRY) private readonly registry: ModelRegistry,
    @Inject(IN_FLIGHT) private readonly inFlight: InFlightCalls,
    @Inject(GATEWAY_METRICS) private readonly metrics: GatewayMetrics,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  @Get(routes('models'))
  async models(@Req() req: FastifyRequest, @Param('sessionKey') sessionKey?: string) {
    await this.auth.authenticate(req.headers.authorization, sessionKey);
    return { object: 'list', data: this.registry.list().map((m) => ({ id: m.name, object: 'model', created: m.created, owned_by: 'anvil', max_model_len: m.maxContextTokens })) };
  }

  @Get(routes('models/:model'))
  async model(@Req() req: FastifyRequest, @Param('model') name: string, @Param('sessionKey') sessionKey?: string) {
    await this.auth.authenticate(req.headers.authorization, sessionKey);
    const m = this.registry.get(name);
    if (!m) throw new ApiError(404, 'invalid_request_error', `The model \`${name}\` does not exist`, 'model_not_found', 'model');
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

  private async answer(req: FastifyRequest, reply: FastifyReply, sessionKey: string | undefined, kind: 'chat' | 'completion'): Promise<void> {
    const receivedAt = Date.now();
    const release = this.inFlight.enter();
    if (!release) return this.fail(reply, new ApiError(503, 'server_error', 'the gateway is shutting down; retry', 'shutting_down'));
    this.metrics.inFlight.inc();
    // The agent hanging up aborts its generation (nothing is answered, so nothing is recorded).
    const gone = new AbortController();
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) gone.abort();
    });
    try {
      let call: PreparedCall;
      let stream = false;
      let includeUsage = false;
      if (kind === 'chat') {
        const parsed = chatRequestSchema.safeParse(req.body);
        // The request's fingerprints go with the session lookup (one database round trip finds
        // the session and the call this one extends); a bad request still answers 401 first
        // when the key is bad.
        let input: ChatInput | undefined;
        let invalid: unknown = parsed.success ? undefined : ApiError.fromZod(parsed.error);
        if (parsed.success) {
          try {
            input = this.calls.chatInput(parsed.data);
          } catch (err) {
            invalid = err;
          }
        }
        const { session, match } = await this.auth.authenticateCall(req.headers.authorization, sessionKey, input ? input.fingerprints.slice(1) : []);
        if (invalid !== undefined || !parsed.success || !input) throw invalid;
        call = await this.calls.prepareChat(session, parsed.data, receivedAt, input, match);
        stream = parsed.data.stream === true;
        includeUsage = parsed.data.stream_options?.include_usage === true;
      } else {
        const session = await this.auth.authenticate(req.headers.authorization, sessionKey);
        const parsed = completionRequestSchema.safeParse(req.body);
        if (!parsed.success) throw ApiError.fromZod(parsed.error);
        call = await this.calls.prepareCompletion(session, parsed.data, receivedAt);
        stream = parsed.data.stream === true;
        includeUsage = parsed.data.stream_options?.include_usage === true;
      }
      await this.calls.admit(call);
      // Where the call landed in the capture, for agents' and tests' bookkeeping (never a secret).
      const headers = {
        'x-anvil-call-ids': call.callIds.join(','),
        'x-anvil-branch-id': call.branchId,
        'x-anvil-capture': call.plan.parent ? `extend:${call.plan.parent.callId}` : `branch:${call.plan.branchCause}`,
      };
      if (stream) {
        const streamed = kind === 'chat' ? streamChat : streamCompletion;
        await streamed(call, this.calls, reply, { includeUsage, signal: gone.signal, headers, toError: (e) => this.toError(e) });
        this.metrics.callSeconds.observe({ route: kind, stream: 'true' }, (Date.now() - receivedAt) / 1000);
        return;
      }
      const generations = await this.calls.generate(call, { signal: gone.signal });
      const choices = await this.calls.record(call, generations);
      this.metrics.callSeconds.observe({ route: kind, stream: 'false' }, (Date.now() - receivedAt) / 1000);
      if (gone.signal.aborted) return; // recorded, but nobody is listening any more
      void reply
        .status(200)
        .headers({ ...headers, ...this.replyHeaders(choices) })
        .send(kind === 'chat' ? chatCompletion(call, choices) : textCompletion(call, choices));
    } catch (err) {
      this.fail(reply, this.toError(err));
    } finally {
      this.metrics.inFlight.dec();
      release();
    }
  }

  private replyHeaders(choices: ChoiceResult[]): Record<string, string> {
    const out: Record<string, string> = {};
    const issue = choices.find((c) => c.reply?.toolCallIssue)?.reply?.toolCallIssue;
    if (issue) out['x-anvil-tool-call-issue'] = issue.replace(/[^\x20-\x7e]/g, '?').slice(0, 300);
    return out;
  }

  private toError(err: unknown): ApiError {
    const e = toApiError(err);
    if (e.status >= 500 && !(err instanceof ApiError)) this.logger.error('call failed', { err });
    return e;
  }

  private fail(reply: FastifyReply, error: ApiError): void {
    if (reply.sent || reply.raw.headersSent || reply.raw.destroyed) return;
    void reply.status(error.status).headers(error.headers).send(error.body());
  }
}
