import { Catch, Inject, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from '@anvil/observability';
import { ERROR_FILTER_OPTIONS, LOGGER, toApiError, type ErrorFilterOptions } from '@anvil/service-kit';
import { anthropicErrorShape } from '../anthropic/anthropic-errors';
import { isAnthropicClient } from '../anthropic/messages-output';
import { openAiErrorShape } from './call-endpoint';

const ANTHROPIC_ROUTE = /\/v1\/messages(?:\/count_tokens)?\/?(?:\?|$)/;
const OPENAI_ROUTE = /\/v1\/(?:chat\/completions|completions|responses)(?:\/[^/?]*)?\/?(?:\?|$)/;

/**
 * Errors raised outside the handlers' own try/catch (routing, body parsing: 413, invalid JSON or
 * UTF-8, 415; auth on the GET routes) in the error shape of the API the client speaks:
 * Anthropic's on the Messages routes, OpenAI's on the chat, completions and Responses routes, and
 * elsewhere (models, unknown routes) Anthropic's for Anthropic's clients (an `anthropic-version`
 * or `x-api-key` header), OpenAI's for the rest. Nothing crashes the process.
 */
@Catch()
export class GatewayErrorFilter implements ExceptionFilter {
  constructor(
    @Inject(LOGGER) private readonly logger: Logger,
    @Inject(ERROR_FILTER_OPTIONS) private readonly options: ErrorFilterOptions,
  ) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const req = http.getRequest<FastifyRequest>();
    const reply = http.getResponse<FastifyReply>();
    const error = toApiError(exception, this.options);
    if (error.status >= 500) this.logger.error('unhandled error', { err: exception });
    if (reply.sent || reply.raw.headersSent) return;
    const url = req.url ?? '';
    const anthropic = ANTHROPIC_ROUTE.test(url) || (!OPENAI_ROUTE.test(url) && isAnthropicClient(req.headers));
    const { status, headers, body } = (anthropic ? anthropicErrorShape : openAiErrorShape)(error);
    void reply.status(status).headers(headers).send(body);
  }
}
