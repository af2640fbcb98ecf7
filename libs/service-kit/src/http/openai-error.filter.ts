import { Catch, HttpException, Inject, Optional, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { Logger } from '@anvil/observability';
import { LOGGER } from '../tokens';
import { ApiError } from './api-error';

/** Per-service tuning of the edge's error bodies (provide under ERROR_FILTER_OPTIONS). */
export interface ErrorFilterOptions {
  /** Applied to every message taken from a framework error (they may echo the URL, which may carry a secret). */
  redact?: (text: string) => string;
  /** Named in the 413 message. */
  bodyLimitBytes?: number;
  /** The service's own mapping of its domain errors (undefined: not one of them). */
  domain?: (err: unknown) => ApiError | undefined;
}
export const ERROR_FILTER_OPTIONS = Symbol('ERROR_FILTER_OPTIONS');

const CODES: Record<number, string> = {
  400: 'invalid_body',
  404: 'not_found',
  405: 'method_not_allowed',
  413: 'request_too_large',
  415: 'unsupported_media_type',
};

/**
 * Maps anything thrown on the way to a reply onto an ApiError: ApiErrors as they are, the
 * framework's 4xx errors (routing, body parsing) with OpenAI's body, anything else as a 500
 * that says nothing of the internals.
 */
export function toApiError(exception: unknown, options: ErrorFilterOptions = {}): ApiError {
  if (exception instanceof ApiError) return exception;
  const mapped = options.domain?.(exception);
  if (mapped) return mapped;
  const redact = options.redact ?? ((t: string) => t);
  let status: number | undefined;
  let message = '';
  if (exception instanceof HttpException) {
    status = exception.getStatus();
    const response = exception.getResponse();
    message = typeof response === 'string' ? response : String((response as { message?: unknown }).message ?? exception.message);
  } else {
    const s = (exception as { statusCode?: unknown })?.statusCode;
    if (typeof s === 'number' && s >= 400 && s < 500) {
      status = s;
      message = (exception as Error).message;
    }
  }
  if (status === undefined || status >= 500) return ApiError.internal('internal error');
  if (status === 413)
    message = options.bodyLimitBytes
      ? `the request body is larger than the ${options.bodyLimitBytes} bytes accepted`
      : 'the request body is too large';
  return new ApiError(status, 'invalid_request_error', redact(message), CODES[status] ?? null);
}

/** Errors raised outside the handlers' own try/catch (routing, body parsing, guards); nothing crashes the process. */
@Catch()
export class OpenAiErrorFilter implements ExceptionFilter {
  constructor(
    @Inject(LOGGER) private readonly logger: Logger,
    @Optional() @Inject(ERROR_FILTER_OPTIONS) private readonly options: ErrorFilterOptions | null = null,
  ) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const reply = host.switchToHttp().getResponse<FastifyReply>();
    const error = toApiError(exception, this.options ?? {});
    if (error.status >= 500) this.logger.error('unhandled error', { err: exception });
    if (reply.sent || reply.raw.headersSent) return;
    void reply.status(error.status).headers(error.headers).send(error.body());
  }
}
