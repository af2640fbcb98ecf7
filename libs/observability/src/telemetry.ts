import { NodeSDK, tracing } from '@opentelemetry/sdk-node';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { KafkaJsInstrumentation } from '@opentelemetry/instrumentation-kafkajs';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';

export interface Telemetry {
  readonly exporting: boolean;
  shutdown(): Promise<void>;
}

let active: Telemetry | null = null;

/**
 * Starts OpenTelemetry. Must run before Nest, pg or kafkajs are required: the
 * instrumentations patch modules at require time, so main.ts imports the file that calls
 * this first.
 *
 * Without an OTLP endpoint nothing is exported, so the HTTP, pg and kafkajs instrumentations
 * are not registered: the HTTP one alone cost about 15% of the gateway's and the
 * inference-proxy's CPU per call (tools/bench/profile-gateway.ts) for spans nobody would see.
 * The SDK still runs (context manager, W3C propagator), so contexts that arrive in Kafka
 * headers are continued and the API calls in our code work; a request then simply starts no
 * trace of its own. Configure the endpoint on every service whose spans you want.
 */
export function startTelemetry(opts: { serviceName: string; otlpEndpoint?: string; version?: string }): Telemetry {
  if (active) return active;
  const spanProcessors: tracing.SpanProcessor[] = [];
  if (opts.otlpEndpoint) {
    const url = `${opts.otlpEndpoint.replace(/\/$/, '')}/v1/traces`;
    spanProcessors.push(new tracing.BatchSpanProcessor(new OTLPTraceExporter({ url })));
  }
  const sdk = new NodeSDK({
    resource: resourceFromAttributes({
      [ATTR_SERVICE_NAME]: opts.serviceName,
      [ATTR_SERVICE_VERSION]: opts.version ?? '0.1.0',
    }),
    // Explicit list (an empty one when not exporting) so the SDK never falls back to its
    // default OTLP exporter pointed at localhost.
    spanProcessors,
    // Metrics are served by prom-client on /metrics and logs go to stdout as JSON lines, so
    // both OTel pipelines stay off. Left unset, the SDK would build OTLP exporters aimed at
    // localhost whose final flush stalls shutdown for seconds when no collector listens.
    metricReaders: [],
    logRecordProcessors: [],
    instrumentations:
      spanProcessors.length === 0
        ? []
        : [
            new HttpInstrumentation({ ignoreIncomingRequestHook: (req) => /^\/(healthz|readyz|metrics)/.test(req.url ?? '') }),
            new PgInstrumentation(),
            new KafkaJsInstrumentation(),
          ],
  });
  sdk.start();
  active = {
    exporting: spanProcessors.length > 0,
    shutdown: async () => {
      await sdk.shutdown();
      active = null;
    },
  };
  return active;
}
