import { Catch, HttpException, Inject, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { Logger } from '@anvil/observability';
import { LOGGER } from '@anvil/service-kit';
import { ApiError } from './api-error';

const CODES: Record<number, string> = { 400: 'invalid_body', 404: 'not_found', 405: 'method_not_allowed', 413: 'request_too_large', 415: 'unsupported_media_type' };

/** Maps anything thrown on the way to a reply onto OpenAI's error body; nothing crashes the process. */
export function toApiError(exception: unknown): ApiError {
  if (exception instanceof ApiError) return exception;
  if (exception instanceof HttpException) {
    const status = exception.getStatus();
    const response = exception.getResponse();
    const message = typeof response === 'string' ? response : String((response as { message?: unknown }).message ?? exception.message);
    return new ApiError(status, status < 500 ? 'invalid_request_error' : 'server_error', status === 413 ? `request body too large: ${message}` : message, CODES[status] ?? null);
  }
  const status = (exception as { statusCode?: unknown })?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) return new ApiError(status, 'invalid_request_error', (exception as Error).message, CODES[status] ?? null);
  return ApiError.internal('internal error');
}

/** Errors raised outside the handlers' own try/catch (routing, body parsing, guards). */
@Catch()
export class OpenAiErrorFilter implements ExceptionFilter {
  constructor(@Inject(LOGGER) private readonly logger: Logger) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const reply = host.switchToHttp().getResponse<FastifyReply>();
    const error = toApiError(exception);
    if (error.status >= 500) this.logger.error('unhandled error', { err: exception });
    if (reply.sent || reply.raw.headersSent) return;
    void reply.status(error.status).headers(error.headers).send(error.body());
  }
}
