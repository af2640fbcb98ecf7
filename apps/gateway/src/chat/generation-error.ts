import { InferenceProxyError } from '@anvil/inference-client';
import { GatewayError } from '../errors';

/**
 * A failed generation as the agent should see it: what the engine refused, what is
 * unavailable, what failed, never an internal address (the proxy's messages name replicas by
 * URL: they are redacted here, and the whole error is logged).
 */
export function generationError(err: unknown, clientGone: boolean): GatewayError {
  if (err instanceof GatewayError) return err;
  if (clientGone) return new GatewayError('client_closed', 'the client went away', 'client_closed');
  if (err instanceof InferenceProxyError) {
    const detail = withoutAddresses(err.body.error.message);
    if (err.status === 400 || err.status === 422)
      return new GatewayError('invalid_request', `the inference engine refused the request: ${detail}`, err.code ?? 'backend_rejected');
    if (err.status === 503 || err.status === 429)
      return new GatewayError('unavailable', `inference unavailable: ${detail}`, err.code ?? 'backend_unavailable');
    return new GatewayError('inference_failed', `inference failed: ${detail}`, err.code ?? 'backend_error');
  }
  // A transport failure (connection refused, reset, timeout): its message names the proxy's
  // address, which is none of the agent's business; the log has it.
  return new GatewayError('inference_failed', 'inference failed: the inference-proxy could not be reached', 'backend_unreachable');
}

/** URLs and host:port pairs (replica addresses in the proxy's messages) replaced by a placeholder. */
export const withoutAddresses = (text: string): string =>
  text
    .replace(/\b[a-z][a-z0-9+.-]*:\/\/[^\s,;)]*[^\s,;):]/gi, '<replica>')
    .replace(/\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b|\[[0-9a-f:]+\](?::\d+)?|\blocalhost:\d+\b/gi, '<address>');
