import type { ApiErrorBody } from '@anvil/contracts';
import type { z } from 'zod';

/** A failed schema check in words: one line per distinct problem (a union reports the same one per branch), at most five; the first problem's field. */
export function describeZodError(error: z.ZodError): { message: string; param: string | null } {
  const issue = error.issues[0];
  const param = issue?.path.length ? issue.path.map(String).join('.') : null;
  const lines = [...new Set(error.issues.map((i) => `${i.path.length ? i.path.map(String).join('.') : 'body'}: ${i.message}`))];
  return { message: lines.slice(0, 5).join('; ') + (lines.length > 5 ? `; and ${lines.length - 5} more` : ''), param };
}

/**
 * An HTTP status with OpenAI's error body `{error: {message, type, param, code}}`: what the
 * official SDKs parse into their APIError classes, and what the gateway's inference client
 * parses from the inference-proxy. Every failure either service answers is one. Domain code
 * throws its own errors; each service maps them onto ApiErrors in one place at its HTTP edge.
 */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
    readonly code: string | null = null,
    readonly param: string | null = null,
    /** Extra response headers (Retry-After on 429). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  body(): ApiErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }

  static invalid(message: string, param: string | null = null, code: string | null = 'invalid_value'): ApiError {
    return new ApiError(400, 'invalid_request_error', message, code, param);
  }

  /** A failed schema check (400 invalid_value), described by describeZodError. */
  static fromZod(error: z.ZodError): ApiError {
    const { message, param } = describeZodError(error);
    return new ApiError(400, 'invalid_request_error', message, 'invalid_value', param);
  }

  static unauthorized(message = 'invalid or missing API key'): ApiError {
    return new ApiError(401, 'invalid_request_error', message, 'invalid_api_key');
  }

  static notFound(message: string, code = 'not_found', param: string | null = null): ApiError {
    return new ApiError(404, 'invalid_request_error', message, code, param);
  }

  static unavailable(message: string, code: string, headers: Record<string, string> = {}): ApiError {
    return new ApiError(503, 'server_error', message, code, null, headers);
  }

  static internal(message: string, code = 'internal_error'): ApiError {
    return new ApiError(500, 'server_error', message, code);
  }
}
