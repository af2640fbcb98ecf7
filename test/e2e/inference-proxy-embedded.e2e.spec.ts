import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEvent, TOPICS, type AnyEventEnvelope } from '@anvil/contracts';
import { InferenceProxyClient, InferenceProxyError } from '@anvil/inference-client';
import { createBus, type MessageBus, type Subscription } from '@anvil/messaging';
import { startService, waitFor, type ServiceProcess } from '@anvil/testing';

/**
 * The built inference-proxy as its own process with INFERENCE_BACKEND=embedded and no checkpoint
 * directory (the engine's built-in tiny model, seed 0), on the real Kafka broker and PostgreSQL:
 * generations' log-probs equal the training forward of the same model, a session's next turn
 * hits the prefix cache, a bad token is a 400, and weights.published with a real checkpoint
 * directory switches the weights (outputs equal that checkpoint's own greedy decode).
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS;
const DATABASE_URL = process.env.DATABASE_URL;
if (!KAFKA_BROKERS || !DATABASE_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
const topicPrefix = `e2e-ipe-${process.pid}.`;

let proxy: ServiceProcess;
let bus: MessageBus;
let sub: Subscription;
const seen: AnyEventEnvelope[] = [];
const dir = mkdtempSync(join(tmpdir(), 'anvil-e2e-embedded-'));

beforeAll(async () => {
  bus = createBus({ kind: 'kafka', brokers: KAFKA_BROKERS.split(','), clientId: 'e2e-inference-proxy-embedded', topicPrefix });
  sub = await bus.subscribe({ group: 'e2e.policy-versions', topics: [TOPICS.policyVersions], handler: async (e) => void seen.push(e) });
  proxy = await startService('inference-proxy', {
    KAFKA_BROKERS,
    DATABASE_URL,
    KAFKA_TOPIC_PREFIX: topicPrefix,
    LOG_LEVEL: 'info',
    INFERENCE_BACKEND: 'embedded',
    DEPLOYMENT_NAME: 'e2e-embedded',
  });
  await waitFor('/readyz 200', async () => ((await fetch(`${proxy.baseUrl}/readyz`)).status === 200 ? true : undefined), 90_000, 250);
});

afterAll(async () => {
  await proxy?.stop('SIGKILL');
  await sub?.stop();
  await bus?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('inference-proxy process with the embedded engine', () => {
  it('generates with the engine, reuses the prefix cache, refuses bad tokens and loads published weights', async () => {
    const { Model, createGenerator, checkpointDigest } = await import('@anvil/engine');
    const client = new InferenceProxyClient({ baseUrl: proxy.baseUrl, timeoutMs: 60_000 });
    const prompt = [11, 12, 13, 14];
    const first = await client.collect({ requestId: 'e2e-e1', sessionId: 's1', promptIds: prompt, maxTokens: 8, seed: 5 });
    expect(first.outputIds).toHaveLength(8);
    expect(first.versions).toEqual(Array(8).fill(0));
    expect(first.finishReason).toBe('length');
    const ref = Model.tiny({ seed: 0 });
    const seq = [...prompt, ...first.outputIds];
    const fw = await ref.forward({ tokens: Int32Array.from(seq), parents: Int32Array.from(seq, (_, i) => i - 1) });
    fw.handle.dispose();
    ref.dispose();
    first.logprobs.forEach((lp, i) => expect(Math.abs(lp - fw.logp[prompt.length + i])).toBeLessThan(1e-4));

    const second = await client.generate({ requestId: 'e2e-e2', sessionId: 's1', promptIds: [...seq, 1, 2], maxTokens: 4, seed: 6 });
    expect(second.cachedPromptTokens).toBe(seq.length - 1);
    expect((await client.replicas()).replicas[0].prefixCacheHitRate).toBeGreaterThan(0);

    const bad = await client
      .generate({ requestId: 'e2e-e3', sessionId: 's1', promptIds: [1, 10_000_000], maxTokens: 2 })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(InferenceProxyError);
    expect((bad as InferenceProxyError).status).toBeLessThan(500);

    const next = Model.tiny({ seed: 3 });
    await next.save(dir);
    const own = await createGenerator(next);
    const expected = await own.generate(prompt, { maxTokens: 6, temperature: 0 });
    await own.close();
    next.dispose();
    // the proxy refuses a checkpoint whose files do not match the published checksum
    await bus.publish(
      createEvent(
        'weights.published',
        {
          version: 6,
          parentVersion: 5,
          step: 60,
          checkpointId: 'ck-6',
          checkpointUri: dir,
          format: 'hf-safetensors',
          sha256: 'c'.repeat(64),
          publishedAt: Date.now(),
        },
        { key: '6', producer: 'trainer' },
      ),
    );
    await bus.publish(
      createEvent(
        'weights.published',
        {
          version: 7,
          parentVersion: 6,
          step: 70,
          checkpointId: 'ck-7',
          checkpointUri: dir,
          format: 'hf-safetensors',
          sha256: await checkpointDigest(dir),
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
    expect(event.payload).toMatchObject({ version: 7, deployment: 'e2e-embedded' });
    expect(seen.filter((e) => e.type === 'policy_version.activated').map((e) => (e.payload as { version: number }).version)).toEqual([7]);
    expect(proxy.output()).toContain('checksum mismatch');
    const after = await client.generate({ requestId: 'e2e-e4', sessionId: 's1', promptIds: prompt, maxTokens: 6, temperature: 0 });
    expect(after.versions).toEqual(Array(6).fill(7));
    expect(after.outputIds).toEqual(expected.outputIds);
    expect(after.cachedPromptTokens).toBe(0); // the reload cleared the prefix cache

    expect(await proxy.stop('SIGTERM')).toBe(0);
    expect(proxy.output()).toContain('stopped cleanly');
  });
});
