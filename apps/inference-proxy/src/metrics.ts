import type { ServiceMetrics } from '@anvil/observability';

/** The proxy's Prometheus series (on the service's /metrics, prefixed anvil_). */
export class InferenceMetrics {
  readonly requests;
  readonly tokens;
  readonly inFlight;
  readonly failovers;
  readonly swapSeconds;
  readonly policyVersion;
  readonly replicaHealthy;

  constructor(metrics: ServiceMetrics) {
    this.requests = metrics.counter('inference_requests_total', 'Generations finished, by outcome (stop, length, abort, error)', [
      'outcome',
    ]);
    this.tokens = metrics.counter('inference_tokens_total', 'Tokens generated, by replica', ['replica']);
    this.inFlight = metrics.gauge('inference_in_flight', 'Generation attempts running, by replica', ['replica']);
    this.failovers = metrics.counter(
      'inference_failovers_total',
      'Attempts moved to another replica, by stage (before_first_token, mid_stream)',
      ['stage'],
    );
    this.swapSeconds = metrics.histogram(
      'inference_weight_swap_seconds',
      'Weight swaps from pause to resume, by policy',
      ['policy'],
      [0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300],
    );
    this.policyVersion = metrics.gauge('inference_policy_version', 'Policy version new tokens are generated with');
    this.replicaHealthy = metrics.gauge('inference_replica_healthy', '1 when the replica takes generations', ['replica']);
  }
}
