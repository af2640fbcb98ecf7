import type { ApiErrorBody } from '@anvil/contracts';
import type { z } from 'zod';

/**
 * An HTTP status with OpenAI's error body `{error: {message, type, param, code}}`: what the
 * official SDKs parse into their APIError classes. Every failure the gateway answers is one.
 */
export class ApiError extends Error {
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

  static fromZod(error: z.ZodError): ApiError {
    const issue = error.issues[0];
    const param = issue?.path.length ? issue.path.map(String).join('.') : null;
    const message = error.issues
      .slice(0, 5)
      .map((i) => `${i.path.length ? i.path.map(String).join('.') : 'body'}: ${i.message}`)
      .join('; ');
    return new ApiError(400, 'invalid_request_error', message, 'invalid_value', param);
  }

  static unauthorized(message = 'invalid or missing API key'): ApiError {
    return new ApiError(401, 'invalid_request_error', message, 'invalid_api_key');
  }

  static internal(message: string, code = 'internal_error'): ApiError {
    return new ApiError(500, 'server_error', message, code);
  }
}
