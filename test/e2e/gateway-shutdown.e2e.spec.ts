import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataSource } from 'typeorm';
import { TOPICS, type EventEnvelope } from '@anvil/contracts';
import { createBus, type MessageBus, type Subscription } from '@anvil/messaging';
import { createDataSource } from '@anvil/persistence';
import { startService, waitFor, type ServiceProcess, type FixtureServer, startVllmFixture } from '@anvil/testing';

/**
 * Graceful shutdown of the built gateway: SIGTERM while calls are in flight, on the
 * real Kafka broker and PostgreSQL, behind the built inference-proxy and a slow vLLM fixture.
 * Every call is either answered (200: then its record is in Kafka and its capture row in
 * PostgreSQL) or cleanly refused (503 `shutting_down` while draining, or a refused connection
 * once the port is closed): never an answer without its record, never a record lost. The
 * process exits 0.
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS;
const DATABASE_URL = process.env.DATABASE_URL;
if (!KAFKA_BROKERS || !DATABASE_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
const topicPrefix = `e2e-gwstop-${process.pid}.`;
const ADMIN = 'e2e-gateway-stop-admin-token-0123456789abcdef';
const MODEL = 'anvil-tiny';

let fixture: FixtureServer;
let proxy: ServiceProcess;
let gateway: ServiceProcess;
let bus: MessageBus;
let sub: Subscription;
let ds: DataSource;
const records = new Map<string, EventEnvelope<'llm_call.recorded'>>();

const ready = (svc: ServiceProcess) =>
  waitFor(`${svc.app} /readyz`, async () => ((await fetch(`${svc.baseUrl}/readyz`)).status === 200 ? true : undefined), 120_000, 250);

beforeAll(async () => {
  // 40 ms a token: a 24-token answer is in flight for about a second.
  fixture = await startVllmFixture({ vocabSize: 272, eosId: 100_000, tokenLatencyMs: 40, weights: 'tiny-e2e-stop' });
  const common = { KAFKA_BROKERS, DATABASE_URL, KAFKA_TOPIC_PREFIX: topicPrefix, LOG_LEVEL: 'info' };
  proxy = await startService('inference-proxy', {
    ...common,
    INFERENCE_BACKEND: 'vllm',
    INFERENCE_REPLICAS: fixture.url,
    DEPLOYMENT_NAME: 'e2e-gwstop',
  });
  gateway = await startService('gateway', {
    ...common,
    GATEWAY_ADMIN_TOKEN: ADMIN,
    INFERENCE_PROXY_URL: proxy.baseUrl,
    GATEWAY_MODEL_NAME: MODEL,
    GATEWAY_MAX_CONTEXT_TOKENS: '4096',
    SHUTDOWN_TIMEOUT_MS: '20000',
  });
  await Promise.all([ready(proxy), ready(gateway)]);
  bus = createBus({ kind: 'kafka', brokers: KAFKA_BROKERS.split(','), clientId: 'e2e-gateway-stop', topicPrefix });
  sub = await bus.subscribe({
    group: 'e2e.gateway-stop.records',
    topics: [TOPICS.llmCalls],
    fromBeginning: true,
    handler: async (e) => {
      if (e.type === 'llm_call.recorded') records.set(e.payload.callId, e);
    },
  });
  ds = createDataSource({ url: DATABASE_URL });
  await ds.initialize();
});

afterAll(async () => {
  await sub?.stop();
  await bus?.close();
  await ds?.destroy();
  await Promise.all([gateway, proxy].map((s) => s?.stop('SIGTERM')));
  await fixture?.close();
});

type Outcome =
  | { kind: 'answered'; callIds: string[]; streamed: boolean }
  | { kind: 'refused'; status: number; code: string | null }
  | { kind: 'unreachable'; error: string };

async function chat(apiKey: string, stream: boolean): Promise<Outcome> {
  try {
    const res = await fetch(`${gateway.baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Count slowly.' }], max_tokens: 24, seed: 7, stream }),
    });
    const text = await res.text();
    if (res.status !== 200)
      return { kind: 'refused', status: res.status, code: (JSON.parse(text) as { error: { code: string | null } }).error.code };
    // A streamed answer is complete only with its final event and [DONE] (sent after the record is durable).
    if (stream && !text.trimEnd().endsWith('data: [DONE]')) throw new Error(`stream cut short: ${text.slice(-200)}`);
    return { kind: 'answered', callIds: (res.headers.get('x-anvil-call-ids') ?? '').split(',').filter(Boolean), streamed: stream };
  } catch (err) {
    if ((err as Error).message.startsWith('stream cut short')) throw err;
    return { kind: 'unreachable', error: String((err as { cause?: { code?: string } }).cause?.code ?? err) };
  }
}

describe('gateway graceful shutdown', () => {
  it('SIGTERM with calls in flight: they are answered and recorded, later calls are refused cleanly, exit 0', async () => {
    const keys: string[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await fetch(`${gateway.baseUrl}/admin/v1/sessions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ rolloutId: `stop-${i}`, groupId: 'g', taskId: 't', model: MODEL }),
      });
      expect(res.status).toBe(201);
      keys.push(((await res.json()) as { apiKey: string }).apiKey);
    }
    const inFlight = keys.slice(0, 8).map((k, i) => chat(k, i % 2 === 1));
    // Let them reach the engine (the fixture counts requests), then stop the gateway.
    await waitFor('calls at the engine', async () => (fixture.stats.requests >= 8 ? true : undefined), 10_000, 10);
    const exited = new Promise<number | null>((r) => gateway.child.once('exit', (code) => r(code)));
    gateway.child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 100));
    const late = keys.slice(8).map((k) => chat(k, false));

    const outcomes = await Promise.all([...inFlight, ...late]);
    expect(await exited).toBe(0);

    // Every call that was running when SIGTERM came was finished and answered.
    const answered = outcomes.slice(0, 8);
    for (const o of answered) expect(o.kind).toBe('answered');
    // Calls arriving while it drains are refused with 503 (or find the port closed): nothing half-done.
    for (const o of outcomes.slice(8)) {
      if (o.kind === 'refused') expect(o).toMatchObject({ status: 503, code: 'shutting_down' });
      else expect(o.kind).toBe('unreachable');
    }

    // Every answered call's record is in Kafka and its capture state in PostgreSQL.
    const ids = answered.flatMap((o) => (o.kind === 'answered' ? o.callIds : []));
    expect(ids).toHaveLength(8);
    await waitFor('records in Kafka', async () => (ids.every((id) => records.has(id)) ? true : undefined), 30_000, 100);
    for (const id of ids) expect(records.get(id)?.payload.outputIds.length).toBeGreaterThan(0);
    const rows: { n: number }[] = await ds.query('SELECT count(*)::int AS n FROM gateway_calls WHERE id = ANY($1)', [ids]);
    expect(rows[0].n).toBe(8);
    expect(gateway.output()).toMatch(/"msg":"stopped cleanly"/);
  }, 90_000);
});
