import { ApiError, toApiError, type ErrorFilterOptions } from '@anvil/service-kit';
import { GatewayError, type GatewayErrorKind } from '../errors';
import { redactSecrets } from './redact';

const STATUS: Record<GatewayErrorKind, number> = {
  invalid_request: 400,
  unauthorized: 401,
  not_found: 404,
  gone: 410,
  unrenderable: 422,
  over_capacity: 429,
  over_limit: 429,
  client_closed: 499,
  inference_failed: 502,
  unavailable: 503,
};

/** A GatewayError as its status and OpenAI's error body (undefined for anything else). */
export function gatewayApiError(err: unknown): ApiError | undefined {
  if (!(err instanceof GatewayError)) return undefined;
  const status = STATUS[err.kind];
  const type = err.extra.type ?? (status === 429 ? 'rate_limit_error' : status >= 500 ? 'server_error' : 'invalid_request_error');
  return new ApiError(status, type, err.message, err.code, err.param, {
    ...(err.retryAfterS !== undefined ? { 'retry-after': String(err.retryAfterS) } : {}),
    ...err.extra.headers,
  });
}

/** The gateway's edge: its domain errors, framework errors with session keys redacted, 413 naming the limit. */
export const gatewayErrorOptions = (bodyLimitBytes: number): ErrorFilterOptions => ({
  domain: gatewayApiError,
  redact: redactSecrets,
  bodyLimitBytes,
});

/** The one mapping of everything the gateway throws onto an HTTP status and OpenAI's error body. */
export const toHttpError = (err: unknown, options: ErrorFilterOptions): ApiError => toApiError(err, options);
