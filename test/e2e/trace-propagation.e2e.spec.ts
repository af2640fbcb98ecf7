import { createServer, type Server } from 'node:http';
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { encodeEvent, TOPICS } from '@anvil/contracts';
import { sampleLlmCallEvent } from '@anvil/contracts/testing';
import { createBus } from '@anvil/messaging';
import { startService, waitFor, startVllmFixture } from '@anvil/testing';

/**
 * One trace follows a trajectory across services: an llm-call event published with a W3C
 * traceparent header is consumed by the middleware process, whose PostgreSQL writes (pg is
 * instrumented because OpenTelemetry starts before it is loaded) become spans of that same
 * trace, exported over OTLP/HTTP to the collector endpoint the service was given.
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS!;
const DATABASE_URL = process.env.DATABASE_URL!;

interface ExportedSpan {
  traceId: string;
  name: string;
  service: string;
}
const spans: ExportedSpan[] = [];
let collector: Server;

afterAll(() => new Promise<void>((r) => (collector ? collector.close(() => r()) : r())));

async function startCollector(): Promise<string> {
  collector = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      if (req.url === '/v1/traces') {
        const payload = JSON.parse(body);
        for (const rs of payload.resourceSpans ?? []) {
          const service = rs.resource?.attributes?.find((a: { key: string }) => a.key === 'service.name')?.value?.stringValue;
          for (const ss of rs.scopeSpans ?? []) for (const s of ss.spans ?? []) spans.push({ traceId: s.traceId, name: s.name, service });
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => collector.listen(0, '127.0.0.1', r));
  const addr = collector.address();
  return `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`;
}

describe('OpenTelemetry across Kafka', () => {
  let endpoint = '';
  const collectorUrl = async () => (endpoint ||= await startCollector());

  it('continues the producer trace in the consuming service and exports it over OTLP', async () => {
    const endpoint = await collectorUrl();
    const topicPrefix = `trace-${process.pid}-${Date.now()}.`;
    const svc = await startService('middleware', {
      KAFKA_BROKERS,
      DATABASE_URL,
      KAFKA_TOPIC_PREFIX: topicPrefix,
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    });
    try {
      await waitFor('middleware ready', async () => ((await fetch(`${svc.baseUrl}/readyz`)).status === 200 ? true : undefined), 60_000);
      const bus = createBus({ kind: 'kafka', brokers: KAFKA_BROKERS.split(','), clientId: 'trace-test', topicPrefix });
      const traceId = randomBytes(16).toString('hex');
      const event = sampleLlmCallEvent({ promptTokens: 64, outputTokens: 8, seed: 11 });
      await bus.publishRaw(TOPICS.llmCalls, {
        key: event.key,
        value: encodeEvent(event),
        headers: { traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01` },
      });
      await bus.close();
      // The service flushes its span batch on SIGTERM.
      const ingested = /anvil_data_pool_events_ingested_total\{[^}]*type="llm_call.recorded"[^}]*\} 1/;
      await waitFor(
        'event ingested',
        async () => (ingested.test(await (await fetch(`${svc.baseUrl}/metrics`)).text()) ? true : undefined),
        60_000,
      );
      expect(await svc.stop('SIGTERM')).toBe(0);
      const ours = spans.filter((s) => s.traceId === traceId);
      expect(ours.length, `spans exported: ${JSON.stringify(spans.slice(0, 20))}`).toBeGreaterThan(0);
      expect(new Set(ours.map((s) => s.service))).toEqual(new Set(['middleware']));
      expect(ours.some((s) => /insert|pg\.query|INSERT/i.test(s.name))).toBe(true);
    } finally {
      await svc.stop('SIGKILL');
    }
  });

  it('an agent call traced into the gateway continues through the inference-proxy and into its llm_call.recorded', async () => {
    const endpoint = await collectorUrl();
    const topicPrefix = `trace-gw-${process.pid}-${Date.now()}.`;
    const fixture = await startVllmFixture({ vocabSize: 272, eosId: 100_000, tokenLatencyMs: 0, weights: 'trace-e2e' });
    const common = { KAFKA_BROKERS, DATABASE_URL, KAFKA_TOPIC_PREFIX: topicPrefix, OTEL_EXPORTER_OTLP_ENDPOINT: endpoint };
    const proxy = await startService('inference-proxy', {
      ...common,
      INFERENCE_BACKEND: 'vllm',
      INFERENCE_REPLICAS: fixture.url,
      DEPLOYMENT_NAME: 'trace-e2e',
    });
    const admin = 'trace-e2e-admin-token-0123456789abcdefghijkl';
    const gateway = await startService('gateway', {
      ...common,
      GATEWAY_ADMIN_TOKEN: admin,
      INFERENCE_PROXY_URL: proxy.baseUrl,
      GATEWAY_MODEL_NAME: 'anvil-tiny',
    });
    const bus = createBus({ kind: 'kafka', brokers: KAFKA_BROKERS.split(','), clientId: 'trace-gw-test', topicPrefix });
    try {
      for (const svc of [proxy, gateway])
        await waitFor(`${svc.app} ready`, async () => ((await fetch(`${svc.baseUrl}/readyz`)).status === 200 ? true : undefined), 60_000);
      const recordTraces: string[] = [];
      const sub = await bus.subscribeRaw({
        group: 'trace-gw-records',
        topics: [TOPICS.llmCalls],
        fromBeginning: true,
        handler: async (m) => void recordTraces.push(m.headers.traceparent ?? ''),
      });
      const opened = await fetch(`${gateway.baseUrl}/admin/v1/sessions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
        body: JSON.stringify({ rolloutId: 'trace-r1', groupId: 'g', taskId: 't', model: 'anvil-tiny' }),
      });
      const { apiKey } = (await opened.json()) as { apiKey: string };
      const traceId = randomBytes(16).toString('hex');
      const res = await fetch(`${gateway.baseUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${apiKey}`,
          'content-type': 'application/json',
          traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01`,
        },
        body: JSON.stringify({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
      });
      expect(res.status).toBe(200);
      await waitFor('the record', async () => (recordTraces.length > 0 ? true : undefined), 30_000);
      await sub.stop();
      expect(recordTraces[0]).toContain(traceId);
      expect(await gateway.stop('SIGTERM')).toBe(0);
      expect(await proxy.stop('SIGTERM')).toBe(0);
      const services = new Set(spans.filter((s) => s.traceId === traceId).map((s) => s.service));
      expect(services, `spans exported: ${JSON.stringify(spans.slice(-20))}`).toEqual(new Set(['gateway', 'inference-proxy']));
    } finally {
      await bus.close();
      await gateway.stop('SIGKILL');
      await proxy.stop('SIGKILL');
      await fixture.close();
    }
  });
});
