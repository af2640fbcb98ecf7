import type { ApiErrorBody } from '@anvil/contracts';
import type { z } from 'zod';
import { BackendRequestError } from '../backends/backend';
import { ServiceShuttingDownError } from '../generation/generation-service';
import { NoReplicaAvailableError } from '../routing/router';

/** An HTTP status with the OpenAI-style error body the gateway already parses. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
    readonly code: string | null = null,
    readonly param: string | null = null,
  ) {
    super(message);
  }

  body(): ApiErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }

  static fromZod(error: z.ZodError): ApiError {
    const issue = error.issues[0];
    const param = issue?.path.length ? issue.path.map(String).join('.') : null;
    const message = error.issues.map((i) => `${i.path.length ? i.path.map(String).join('.') : 'body'}: ${i.message}`).join('; ');
    return new ApiError(400, 'invalid_request_error', message, issue?.code ?? 'invalid_value', param);
  }

  /** Maps what the generation path throws onto statuses. */
  static from(err: unknown): ApiError {
    if (err instanceof ApiError) return err;
    if (err instanceof NoReplicaAvailableError) return new ApiError(503, 'server_error', err.message, 'no_replica_available');
    if (err instanceof ServiceShuttingDownError) return new ApiError(503, 'server_error', err.message, 'shutting_down');
    if (err instanceof BackendRequestError) return new ApiError(400, 'invalid_request_error', `the inference engine refused the request: ${err.message}`, 'backend_rejected');
    return new ApiError(502, 'server_error', `generation failed: ${(err as Error).message}`, 'backend_error');
  }
}
