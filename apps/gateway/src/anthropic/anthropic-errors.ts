import type { ApiError } from '@anvil/service-kit';
import type { ErrorShape } from '../http/call-endpoint';

/**
 * The gateway's statuses as Anthropic's error types and statuses, which its SDKs map onto their
 * error classes and retry rules (429 and 5xx are retried). What Anthropic has no status for
 * takes the nearest one: a closed session is a permission error (403, not retried), a body
 * that is not JSON or a template that refuses the messages an invalid request (400), a failed
 * generation an api_error (500), and "retry later" (no replica, record not durable, shutting
 * down) overloaded (529).
 */
const BY_STATUS: Record<number, [number, string]> = {
  400: [400, 'invalid_request_error'],
  401: [401, 'authentication_error'],
  403: [403, 'permission_error'],
  404: [404, 'not_found_error'],
  405: [405, 'invalid_request_error'],
  410: [403, 'permission_error'],
  413: [413, 'request_too_large'],
  415: [400, 'invalid_request_error'],
  422: [400, 'invalid_request_error'],
  429: [429, 'rate_limit_error'],
  503: [529, 'overloaded_error'],
};

export function anthropicError(e: ApiError): { status: number; type: string; message: string } {
  const [status, type] = BY_STATUS[e.status] ?? (e.status >= 500 ? [500, 'api_error'] : [e.status, 'invalid_request_error']);
  return { status, type, message: e.message };
}

/** `{"type": "error", "error": {"type", "message"}}` with Anthropic's status. */
export const anthropicErrorShape: ErrorShape = (e) => {
  const { status, type, message } = anthropicError(e);
  return { status, headers: e.headers, body: { type: 'error', error: { type, message } } };
};
