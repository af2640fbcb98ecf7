import type { ServiceMetrics } from '@anvil/observability';

/** The gateway's Prometheus metrics (anvil_gateway_*). */
export class GatewayMetrics {
  readonly requests;
  readonly tokens;
  readonly capture;
  readonly backpressure;
  readonly refused;
  readonly records;
  readonly inFlight;
  readonly callSeconds;
  readonly outboxPublished;
  readonly outboxBacklog;

  constructor(metrics: ServiceMetrics) {
    this.requests = metrics.counter('gateway_requests_total', 'HTTP requests answered, by route and status', ['route', 'status']);
    this.tokens = metrics.counter('gateway_tokens_total', 'Tokens of answered calls (prompt, reused prompt, output)', ['kind']);
    this.capture = metrics.counter(
      'gateway_capture_total',
      'Calls that extended a previous call token-exactly vs started a branch, with the branch reason',
      ['kind', 'reason'],
    );
    this.backpressure = metrics.counter('gateway_backpressure_total', 'First calls refused with 429 over staleness capacity');
    this.refused = metrics.counter(
      'gateway_calls_refused_total',
      "Calls refused with 429 by their session's call limits (nothing generated or recorded), by reason: budget (spent) or rate (over the limit)",
      ['reason'],
    );
    this.records = metrics.counter(
      'gateway_records_total',
      'Answered calls by record outcome: durable (committed with its outbox event), failed (not answered), skipped (capture off)',
      ['outcome'],
    );
    this.outboxPublished = metrics.counter(
      'gateway_outbox_published_total',
      'llm_call.recorded events published from the outbox: direct (right after their commit) or sweep (rows left by a stopped gateway)',
      ['via'],
    );
    this.outboxBacklog = metrics.gauge(
      'gateway_outbox_backlog',
      'Committed llm_call.recorded events this gateway has not had acknowledged by the broker yet',
    );
    this.inFlight = metrics.gauge('gateway_calls_in_flight', 'Calls being generated or recorded');
    this.callSeconds = metrics.histogram(
      'gateway_call_seconds',
      'Wall time of answered calls',
      ['route', 'stream'],
      [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    );
  }
}
