import { Controller, Inject, Param, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ChatTemplateError } from '@anvil/tokenizer';
import { ignoredToolsHeader } from '../adapters/chat-form';
import { anthropicErrorShape } from '../anthropic/anthropic-errors';
import { conversation, toChatForm, type MessagesInput } from '../anthropic/messages-input';
import { anthropicAuthorization, messageObject } from '../anthropic/messages-output';
import { countTokensRequestSchema, messagesRequestSchema } from '../anthropic/messages-request';
import { openMessagesStream } from '../anthropic/messages-sse';
import type { SessionAuthenticator } from '../auth/session-auth';
import { GatewayError } from '../errors';
import { servedModelFor, type ModelRegistry } from '../models/model-registry';
import { describeSchemaError } from '../openai/chat-request';
import { toChatMessages, toToolDefinitions } from '../openai/messages';
import type { CallStream } from '../sse/sse-stream';
import { CALL_ENDPOINT, MODEL_REGISTRY, SESSION_AUTH } from '../tokens';
import { captureHeaders, toolCallIssueHeader, type CallEndpoint } from './call-endpoint';
import { routes } from './openai.controller';

/**
 * The Anthropic Messages API: POST messages (JSON or Anthropic's SSE events) and POST
 * messages/count_tokens. A thin adapter: content blocks become the call service's chat form
 * (messages-input.ts), the recorded call becomes a message object (messages-output.ts), and
 * every error takes Anthropic's shape and status (anthropic-errors.ts). The session key comes in
 * `x-api-key` or `Authorization: Bearer`, or is the per-session URL's, as for the OpenAI routes;
 * `anthropic-version` and `anthropic-beta` are accepted whatever they say.
 */
@Controller()
export class AnthropicController {
  constructor(
    @Inject(SESSION_AUTH) private readonly auth: SessionAuthenticator,
    @Inject(CALL_ENDPOINT) private readonly endpoint: CallEndpoint,
    @Inject(MODEL_REGISTRY) private readonly registry: ModelRegistry,
  ) {}

  @Post(routes('messages'))
  async create(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('sessionKey') sessionKey?: string): Promise<void> {
    const authorization = anthropicAuthorization(req.headers);
    let input: MessagesInput | undefined;
    const headers = (extra: Record<string, string>) => ({ ...extra, ...ignoredToolsHeader(input?.ignoredTools ?? []) });
    await this.endpoint.run<CallStream>(reply, {
      route: 'messages',
      shape: anthropicErrorShape,
      request: async () => {
        try {
          const parsed = messagesRequestSchema.safeParse(req.body);
          if (!parsed.success) throw describeSchemaError(parsed.error);
          input = toChatForm(parsed.data);
        } catch (err) {
          // A bad request with a bad key answers 401 first, as chat completions does.
          if (err instanceof GatewayError && err.kind === 'invalid_request') await this.auth.authenticate(authorization, sessionKey);
          throw err;
        }
        return { kind: 'chat', body: undefined, chat: input.chat, authorization, sessionKey };
      },
      openStream: (call) => openMessagesStream(call, reply, headers(captureHeaders(call))),
      complete: (call, choices, stream, gone) => {
        if (stream) return stream.finish(choices);
        if (gone) return;
        void reply
          .status(200)
          .headers(headers({ ...captureHeaders(call), ...toolCallIssueHeader(choices) }))
          .send(messageObject(call, choices[0]));
      },
    });
  }

  /** The prompt's size as the model's template renders it and its tokenizer encodes it (nothing is generated or recorded). */
  @Post(routes('messages/count_tokens'))
  async countTokens(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('sessionKey') sessionKey?: string): Promise<void> {
    try {
      const parsed = countTokensRequestSchema.safeParse(req.body);
      const session = await this.auth.authenticate(anthropicAuthorization(req.headers), sessionKey);
      if (!parsed.success) throw describeSchemaError(parsed.error);
      const model = servedModelFor(this.registry, session, parsed.data.model);
      const { messages, tools } = conversation(parsed.data);
      let text: string;
      try {
        text = model.format.template.render(toChatMessages(messages), { tools: toToolDefinitions(tools), addGenerationPrompt: true });
      } catch (err) {
        if (err instanceof ChatTemplateError)
          throw GatewayError.invalid(`the messages cannot be rendered with this model's chat template: ${err.message}`, 'messages');
        throw err;
      }
      void reply.status(200).send({ input_tokens: model.format.tokenizer.encode(text).length });
    } catch (err) {
      this.endpoint.fail(reply, anthropicErrorShape, this.endpoint.toError(err));
    }
  }
}
