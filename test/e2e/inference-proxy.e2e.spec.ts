import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEvent, TOPICS, type AnyEventEnvelope } from '@anvil/contracts';
import { InferenceProxyClient } from '@anvil/inference-client';
import { createBus, type MessageBus, type Subscription } from '@anvil/messaging';
import { startService, waitFor, type ServiceProcess, type FixtureServer, startVllmFixture } from '@anvil/testing';

/**
 * The built inference-proxy as its own process (INFERENCE_BACKEND=vllm) in front of two vLLM
 * protocol fixtures, on the real Kafka broker and PostgreSQL: generations carry version 0, a
 * weights.published on the bus makes every replica load the checkpoint, later generations carry
 * the new version, and the proxy announces policy_version.activated. SIGTERM stops it cleanly.
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS;
const DATABASE_URL = process.env.DATABASE_URL;
if (!KAFKA_BROKERS || !DATABASE_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
const topicPrefix = `e2e-ip-${process.pid}.`;

let proxy: ServiceProcess;
let bus: MessageBus;
let sub: Subscription;
const seen: AnyEventEnvelope[] = [];
const fixtures: FixtureServer[] = [];

beforeAll(async () => {
  for (let i = 0; i < 2; i++) fixtures.push(await startVllmFixture({ tokenLatencyMs: 2 }));
  bus = createBus({ kind: 'kafka', brokers: KAFKA_BROKERS.split(','), clientId: 'e2e-inference-proxy', topicPrefix });
  sub = await bus.subscribe({ group: 'e2e.policy-versions', topics: [TOPICS.policyVersions], handler: async (e) => void seen.push(e) });
  proxy = await startService('inference-proxy', {
    KAFKA_BROKERS,
    DATABASE_URL,
    KAFKA_TOPIC_PREFIX: topicPrefix,
    LOG_LEVEL: 'info',
    INFERENCE_BACKEND: 'vllm',
    INFERENCE_REPLICAS: fixtures.map((f) => f.url).join(','),
    WEIGHT_SWAP_POLICY: 'drain-then-swap',
    DEPLOYMENT_NAME: 'e2e',
  });
  await waitFor('/readyz 200', async () => ((await fetch(`${proxy.baseUrl}/readyz`)).status === 200 ? true : undefined), 90_000, 250);
});

afterAll(async () => {
  await proxy?.stop('SIGKILL');
  await sub?.stop();
  await bus?.close();
  await Promise.all(fixtures.map((f) => f.close()));
});

describe('inference-proxy process with vLLM replicas', () => {
  it('switches policy version on weights.published and announces it', async () => {
    const client = new InferenceProxyClient({ baseUrl: proxy.baseUrl, timeoutMs: 30_000 });
    const req = { requestId: 'e2e-1', sessionId: 'e2e-session', promptIds: [11, 12, 13], maxTokens: 6, seed: 5 };
    const before = await client.generate(req);
    expect(before.versions).toEqual([0, 0, 0, 0, 0, 0]);
    expect(fixtures.map((f) => f.url)).toContain(before.replica);

    await bus.publish(
      createEvent(
        'weights.published',
        {
          version: 7,
          parentVersion: 6,
          step: 70,
          checkpointId: 'ck-7',
          checkpointUri: '/checkpoints/step-70',
          format: 'hf-safetensors',
          sha256: 'c'.repeat(64),
          publishedAt: Date.now(),
        },
        { key: '7', producer: 'trainer' },
      ),
    );
    const event = await waitFor(
      'policy_version.activated',
      async () => seen.find((e) => e.type === 'policy_version.activated'),
      60_000,
      100,
    );
    expect(event.payload).toMatchObject({ version: 7, deployment: 'e2e', swapPolicy: 'drain-then-swap' });
    for (const f of fixtures) expect(f.stats.loads).toEqual(['/checkpoints/step-70']);

    const after = await client.collect({ ...req, requestId: 'e2e-2' });
    expect(after.versions).toEqual([7, 7, 7, 7, 7, 7]);
    expect(after.outputIds).not.toEqual(before.outputIds);
    const report = await client.replicas();
    expect(report).toMatchObject({ policyVersion: 7, checkpointUri: '/checkpoints/step-70' });

    const metrics = await (await fetch(`${proxy.baseUrl}/metrics`)).text();
    expect(metrics).toContain('anvil_inference_tokens_total');
    expect(metrics).toContain('anvil_inference_weight_swap_seconds');
    expect(metrics).toMatch(/anvil_inference_policy_version\{[^}]*\} 7/);

    expect(await proxy.stop('SIGTERM')).toBe(0);
    expect(proxy.output()).toContain('stopped cleanly');
  });
});
