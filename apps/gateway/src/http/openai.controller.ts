import { Controller, Get, Inject, Param, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { SessionAuthenticator } from '../auth/session-auth';
import { GatewayError } from '../errors';
import type { ModelRegistry } from '../models/model-registry';
import { chatCompletion, textCompletion } from '../openai/chat-response';
import { openChatStream } from '../sse/chat-sse';
import { openCompletionStream } from '../sse/completion-sse';
import type { CallStream } from '../sse/sse-stream';
import { CALL_ENDPOINT, MODEL_REGISTRY, SESSION_AUTH } from '../tokens';
import { anthropicModel, isAnthropicClient } from '../anthropic/messages-output';
import { captureHeaders, openAiErrorShape, toolCallIssueHeader, type CallEndpoint } from './call-endpoint';

/** Every agent route exists twice: under /v1 (key in `Authorization: Bearer`) and under the per-session base URL /sessions/<key>/v1. */
export const routes = (path: string) => [`v1/${path}`, `sessions/:sessionKey/v1/${path}`];

/**
 * The agent-facing OpenAI API: POST chat/completions (JSON or SSE; tools, n, stop, logprobs and
 * top_logprobs), POST completions (JSON or SSE; logprobs: k), GET models (in Anthropic's shape
 * for Anthropic's clients). The call itself is CallService.answer (recorded durably before the
 * answer), run by the CallEndpoint every API shares; this layer only shapes its result as JSON
 * or as a stream.
 */
@Controller()
export class OpenAiController {
  constructor(
    @Inject(SESSION_AUTH) private readonly auth: SessionAuthenticator,
    @Inject(CALL_ENDPOINT) private readonly endpoint: CallEndpoint,
    @Inject(MODEL_REGISTRY) private readonly registry: ModelRegistry,
  ) {}

  /**
   * The served model needs no session key under /v1 (its name is no secret, and whoever sets up
   * a rollout must learn it before any session exists); under a per-session URL the key is
   * checked as for every call. Anthropic's clients (an `anthropic-version` or `x-api-key` header)
   * get Anthropic's list shape.
   */
  @Get(routes('models'))
  async models(@Req() req: FastifyRequest, @Param('sessionKey') sessionKey?: string) {
    if (sessionKey !== undefined) await this.auth.authenticate(req.headers.authorization, sessionKey);
    const models = this.registry.list();
    if (isAnthropicClient(req.headers)) {
      const data = models.map(anthropicModel);
      return { data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
    }
    return {
      object: 'list',
      data: models.map((m) => ({ id: m.name, object: 'model', created: m.created, owned_by: 'anvil', max_model_len: m.maxContextTokens })),
    };
  }

  @Get(routes('models/:model'))
  async model(@Req() req: FastifyRequest, @Param('model') name: string, @Param('sessionKey') sessionKey?: string) {
    if (sessionKey !== undefined) await this.auth.authenticate(req.headers.authorization, sessionKey);
    const m = this.registry.get(name);
    if (!m) throw GatewayError.modelNotFound(name);
    if (isAnthropicClient(req.headers)) return anthropicModel(m);
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

  private answer(req: FastifyRequest, reply: FastifyReply, sessionKey: string | undefined, kind: 'chat' | 'completion'): Promise<void> {
    return this.endpoint.run<CallStream>(reply, {
      route: kind,
      shape: openAiErrorShape,
      request: async () => ({ kind, body: req.body, authorization: req.headers.authorization, sessionKey }),
      openStream: (call) => (kind === 'chat' ? openChatStream : openCompletionStream)(call, reply, captureHeaders(call)),
      complete: (call, choices, stream, gone) => {
        if (stream) return stream.finish(choices);
        if (gone) return; // recorded, but nobody is listening any more
        void reply
          .status(200)
          .headers({ ...captureHeaders(call), ...toolCallIssueHeader(choices) })
          .send(kind === 'chat' ? chatCompletion(call, choices) : textCompletion(call, choices));
      },
    });
  }
}
