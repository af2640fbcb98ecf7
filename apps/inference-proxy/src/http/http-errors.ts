import { ApiError } from '@anvil/service-kit';
import { BackendRequestError } from '../backends/backend';
import { ServiceShuttingDownError } from '../generation/generation-service';
import { NoReplicaAvailableError } from '../routing/router';

/** The proxy's domain errors as statuses, in one place (undefined for anything else). */
export function proxyApiError(err: unknown): ApiError | undefined {
  if (err instanceof NoReplicaAvailableError) return ApiError.unavailable(err.message, 'no_replica_available');
  if (err instanceof ServiceShuttingDownError) return ApiError.unavailable(err.message, 'shutting_down');
  if (err instanceof BackendRequestError)
    return new ApiError(400, 'invalid_request_error', `the inference engine refused the request: ${err.message}`, 'backend_rejected');
  return undefined;
}

/** What a failed generation answers: a known refusal, or a 502 naming the engine failure. */
export function generationApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  return proxyApiError(err) ?? new ApiError(502, 'server_error', `generation failed: ${(err as Error).message}`, 'backend_error');
}
