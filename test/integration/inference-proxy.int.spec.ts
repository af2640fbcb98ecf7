import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { createEvent, TOPICS, type AnyEventEnvelope } from '@anvil/contracts';
import { InferenceProxyClient, InferenceProxyError } from '@anvil/inference-client';
import { createBus, type MessageBus, type Subscription } from '@anvil/messaging';
import { createLogger, ServiceMetrics, type Telemetry } from '@anvil/observability';
import { waitFor, fixtureGenerate, type FixtureServer, startVllmFixture } from '@anvil/testing';
import { InferenceProxyModule, inferenceProxyEnv } from '@anvil/inference-proxy';

/**
 * The inference-proxy's Nest app in-process on the real Kafka broker and PostgreSQL, in front of
 * two vLLM protocol fixtures: the HTTP API (validation, JSON, NDJSON streaming, disconnects)
 * through the typed client, and weight versions driven by weights.published on Kafka.
 */
const brokers = process.env.KAFKA_BROKERS;
const databaseUrl = process.env.DATABASE_URL;
const topicPrefix = `ip-int-${process.pid}-${Date.now() % 100000}.`;
let app: NestFastifyApplication;
let baseUrl: string;
let client: InferenceProxyClient;
let bus: MessageBus;
let activations: Subscription;
const activated: AnyEventEnvelope[] = [];
const fixtures: FixtureServer[] = [];

beforeAll(async () => {
  if (!brokers || !databaseUrl) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
  for (let i = 0; i < 2; i++) fixtures.push(await startVllmFixture({ tokenLatencyMs: 5 }));
  const config = inferenceProxyEnv.parse({
    KAFKA_BROKERS: brokers,
    DATABASE_URL: databaseUrl,
    KAFKA_TOPIC_PREFIX: topicPrefix,
    PORT: '0',
    INFERENCE_BACKEND: 'vllm',
    INFERENCE_REPLICAS: fixtures.map((f) => f.url).join(','),
    WEIGHT_SWAP_POLICY: 'abort-and-resume',
    DEPLOYMENT_NAME: 'int-test',
    HEALTH_INTERVAL_MS: '200',
  });
  const logger = createLogger({ service: 'inference-proxy', level: 'error', sink: () => undefined });
  const ctx = {
    service: 'inference-proxy',
    config,
    logger,
    metrics: new ServiceMetrics('inference-proxy'),
    telemetry: { shutdown: async () => undefined } as unknown as Telemetry,
  };
  app = await NestFactory.create<NestFastifyApplication>(InferenceProxyModule.forRoot(ctx), new FastifyAdapter(), { logger: false });
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as { port: number };
  baseUrl = `http://127.0.0.1:${address.port}`;
  client = new InferenceProxyClient({ baseUrl });
  bus = createBus({ kind: 'kafka', brokers: brokers.split(','), clientId: 'ip-int-test', topicPrefix });
  activations = await bus.subscribe({
    group: 'it.policy-versions',
    topics: [TOPICS.policyVersions],
    handler: async (e) => void activated.push(e),
  });
  await waitFor('/readyz 200', async () => ((await fetch(`${baseUrl}/readyz`)).status === 200 ? true : undefined), 90_000, 250);
});

afterAll(async () => {
  await activations?.stop();
  await bus?.close();
  await app?.close();
  await Promise.all(fixtures.map((f) => f.close()));
});

const post = (body: unknown, raw = false) =>
  fetch(`${baseUrl}/internal/v1/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: raw ? (body as string) : JSON.stringify(body),
  });
const valid = { requestId: 'r', sessionId: 's', promptIds: [1, 2, 3], maxTokens: 5, seed: 3 };

describe('POST /internal/v1/generate', () => {
  it.each([
    ['a missing field', { ...valid, promptIds: undefined }, 'promptIds'],
    ['an empty prompt', { ...valid, promptIds: [] }, 'promptIds'],
    ['a negative token id', { ...valid, promptIds: [1, -2] }, 'promptIds.1'],
    ['a fractional maxTokens', { ...valid, maxTokens: 2.5 }, 'maxTokens'],
    ['top_p above 1', { ...valid, topP: 1.5 }, 'topP'],
    ['a string stream flag', { ...valid, stream: 'yes' }, 'stream'],
  ])('answers 400 with an OpenAI-style error for %s', async (_what, body, param) => {
    const res = await post(body);
    expect(res.status).toBe(400);
    const json = (await res.json()) as { error: Record<string, unknown> };
    expect(json.error).toMatchObject({ type: 'invalid_request_error', param });
    expect(String(json.error.message)).toContain(param);
  });

  it('answers 400 for a body that is not JSON', async () => {
    const res = await post('{not json', true);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { type: 'invalid_request_error', code: 'invalid_body' } });
  });

  it('returns ids, logprobs and a version per token; sessions stick to a replica', async () => {
    const res = await client.generate({ ...valid, requestId: 'json-1', sessionId: 'sticky' });
    const want = fixtureGenerate([1, 2, 3], { maxTokens: 5, seed: 3, weights: 'initial' });
    expect(res).toMatchObject({
      requestId: 'json-1',
      outputIds: want.ids,
      logprobs: want.logprobs,
      versions: [0, 0, 0, 0, 0],
      finishReason: 'length',
      promptTokens: 3,
    });
    expect(fixtures.map((f) => f.url)).toContain(res.replica);
    const again = await client.generate({ ...valid, requestId: 'json-2', sessionId: 'sticky', promptIds: [1, 2, 3, ...res.outputIds] });
    expect(again.replica).toBe(res.replica);
    // The whole 8-token prompt is cached but the last position is always recomputed (as in vLLM/SGLang).
    expect(again.cachedPromptTokens).toBe(7);
  });

  it('streams NDJSON token chunks, then the whole response', async () => {
    const chunks: number[] = [];
    const res = await client.collect({ ...valid, requestId: 'stream-1', maxTokens: 12 }, { onChunk: (c) => chunks.push(...c.ids) });
    expect(chunks).toEqual(res.outputIds);
    expect(res.outputIds).toHaveLength(12);
    const raw = await post({ ...valid, requestId: 'stream-2', stream: true });
    expect(raw.headers.get('content-type')).toContain('application/x-ndjson');
    const lines = (await raw.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.slice(0, -1).every((l) => l.type === 'tokens')).toBe(true);
    expect(lines.at(-1)).toMatchObject({ type: 'done', response: { requestId: 'stream-2', finishReason: 'length' } });
  });

  it('a client that disconnects aborts the generation upstream', async () => {
    const before = fixtures.reduce((s, f) => s + f.stats.aborted, 0);
    const controller = new AbortController();
    const seen: number[] = [];
    await expect(
      client.collect(
        { ...valid, requestId: 'gone', maxTokens: 2000 },
        {
          signal: controller.signal,
          onChunk: (c) => {
            seen.push(...c.ids);
            if (seen.length >= 3) controller.abort();
          },
        },
      ),
    ).rejects.toThrow();
    await waitFor(
      'the engine to see the abort',
      async () => (fixtures.reduce((s, f) => s + f.stats.aborted, 0) > before ? true : undefined),
      10_000,
    );
    await waitFor('no generation left running', async () => (fixtures.every((f) => f.running === 0) ? true : undefined), 10_000);
  });

  it('reports replicas with load, health and prefix-cache hits', async () => {
    const report = await client.replicas();
    expect(report).toMatchObject({ deployment: 'int-test', swapPolicy: 'abort-and-resume' });
    expect(report.replicas).toHaveLength(2);
    expect(report.replicas.every((r) => r.healthy && r.routable)).toBe(true);
    expect(report.replicas.some((r) => r.prefixCacheHitRate > 0)).toBe(true);
  });
});

describe('weights.published on Kafka', () => {
  const published = (version: number, id?: string) =>
    createEvent(
      'weights.published',
      {
        version,
        parentVersion: version - 1,
        step: version * 10,
        checkpointId: `ck-${version}`,
        checkpointUri: `/ckpt/v${version}`,
        format: 'hf-safetensors',
        sha256: 'b'.repeat(64),
        publishedAt: Date.now(),
      },
      { key: String(version), producer: 'trainer', id },
    );

  it('abort-and-resume: a generation spanning the swap carries both versions, later ones the new version; activation published', async () => {
    const chunks: number[] = [];
    let sent = false;
    const spanning = client.collect(
      { ...valid, requestId: 'span', maxTokens: 300 },
      {
        onChunk: (c) => {
          chunks.push(...c.versions);
          if (!sent && chunks.length >= 5) {
            sent = true;
            void bus.publish(published(1));
          }
        },
      },
    );
    const res = await spanning;
    expect(res.versions[0]).toBe(0);
    expect(res.versions.at(-1)).toBe(1);
    expect(res.outputIds).toHaveLength(300);
    await waitFor(
      'policy_version.activated',
      async () => (activated.some((e) => e.type === 'policy_version.activated' && e.payload.version === 1) ? true : undefined),
      30_000,
    );
    expect(activated[0].payload).toMatchObject({ version: 1, deployment: 'int-test', swapPolicy: 'abort-and-resume' });
    expect((await client.generate({ ...valid, requestId: 'after' })).versions).toEqual([1, 1, 1, 1, 1]);
    for (const f of fixtures) expect(f.stats.loads).toEqual(['/ckpt/v1']);
  });

  it('ignores a redelivered or older weights.published', async () => {
    const event = published(2);
    await bus.publish(event);
    await waitFor('version 2 active', async () => ((await client.replicas()).policyVersion === 2 ? true : undefined), 30_000);
    await bus.publish([event, published(1)]);
    await new Promise((r) => setTimeout(r, 1_500));
    expect((await client.replicas()).policyVersion).toBe(2);
    for (const f of fixtures) expect(f.stats.loads).toEqual(['/ckpt/v1', '/ckpt/v2']);
    expect(activated.filter((e) => e.type === 'policy_version.activated' && e.payload.version === 2)).toHaveLength(1);
  });

  it('answers 503 with a typed error when no replica can serve', async () => {
    for (const f of fixtures) f.setHealthy(false);
    await waitFor(
      'replicas out of rotation',
      async () => ((await client.replicas()).replicas.every((r) => !r.healthy) ? true : undefined),
      10_000,
    );
    const err = await client.generate({ ...valid, requestId: 'none' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InferenceProxyError);
    expect(err).toMatchObject({ status: 503, code: 'no_replica_available' });
    for (const f of fixtures) f.setHealthy(true);
  });
});
