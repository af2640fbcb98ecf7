/**
 * What goes wrong on the gateway's call path, said in its own terms. Domain code (calls,
 * sessions, auth, capture) throws these; the HTTP edge maps each kind onto one status and
 * OpenAI's error body, in one place (http/http-errors.ts).
 */
export type GatewayErrorKind =
  /** The request is malformed or asks for what this gateway does not do (400). */
  | 'invalid_request'
  /** No usable credential (401). */
  | 'unauthorized'
  /** Names a model or a session that does not exist (404). */
  | 'not_found'
  /** The session is closed or expired (410). */
  | 'gone'
  /** The messages cannot be rendered with the model's chat template (422). */
  | 'unrenderable'
  /** Over staleness capacity; retry later (429). */
  | 'over_capacity'
  /** Over the session's call limits: its budget is spent, or its rate limit says wait (429). */
  | 'over_limit'
  /** The agent hung up before the answer (499, never sent). */
  | 'client_closed'
  /** The inference-proxy or its engine failed the generation (502). */
  | 'inference_failed'
  /** No replica, the record could not be made durable, or shutting down; retry (503). */
  | 'unavailable';

export class GatewayError extends Error {
  override readonly name = 'GatewayError';
  constructor(
    readonly kind: GatewayErrorKind,
    message: string,
    /** OpenAI's `code` (machine-readable, stable). */
    readonly code: string,
    /** The request field at fault, when there is one. */
    readonly param: string | null = null,
    /** over_capacity, over_limit: seconds to wait before retrying. */
    readonly retryAfterS?: number,
    /** What OpenAI's body says as its `type` where the status alone does not say it (insufficient_quota), and headers to answer with. */
    readonly extra: { type?: string; headers?: Record<string, string> } = {},
  ) {
    super(message);
  }

  static invalid(message: string, param: string | null = null, code = 'invalid_value'): GatewayError {
    return new GatewayError('invalid_request', message, code, param);
  }

  static unauthorized(message = 'invalid or missing API key', code = 'invalid_api_key'): GatewayError {
    return new GatewayError('unauthorized', message, code);
  }

  static modelNotFound(name: string): GatewayError {
    return new GatewayError('not_found', `The model \`${name}\` does not exist`, 'model_not_found', 'model');
  }

  static sessionNotFound(): GatewayError {
    return new GatewayError('not_found', 'no such session', 'session_not_found');
  }
}
