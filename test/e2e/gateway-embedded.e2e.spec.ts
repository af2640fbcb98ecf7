import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { TOPICS, type EventEnvelope } from '@anvil/contracts';
import { createBus, type MessageBus, type Subscription } from '@anvil/messaging';
import { createScratchDatabase, runBuilt, startService, waitFor, type ScratchDatabase, type ServiceProcess } from '@anvil/testing';
import { BYTE_VOCAB_SIZE, ByteTokenizer } from '@anvil/tokenizer';

/**
 * The built gateway in front of the built inference-proxy serving the embedded engine's built-in
 * tiny model (the default a new user gets), on the real Kafka broker and PostgreSQL: the model
 * and the gateway's byte tokenizer share one vocabulary, so every sampled id decodes (replies
 * are not near-empty); both services log which model, tokenizer and vocabulary they serve. A
 * proxy serving a checkpoint of another vocabulary makes the gateway refuse to start (exit 78,
 * naming both sizes).
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS;
const DATABASE_URL = process.env.DATABASE_URL;
if (!KAFKA_BROKERS || !DATABASE_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
const topicPrefix = `e2e-gwe-${process.pid}.`;
const ADMIN = 'e2e-gateway-embedded-admin-0123456789abcdef';
let db: ScratchDatabase;
let common: Record<string, string>;

let proxy: ServiceProcess;
let gateway: ServiceProcess;
let bus: MessageBus;
let sub: Subscription;
const records = new Map<string, EventEnvelope<'llm_call.recorded'>>();
const ready = (svc: ServiceProcess) =>
  waitFor(`${svc.app} /readyz`, async () => ((await fetch(`${svc.baseUrl}/readyz`)).status === 200 ? true : undefined), 120_000, 250);

beforeAll(async () => {
  db = await createScratchDatabase(DATABASE_URL, 'anvil_e2e_gw_embedded');
  common = { KAFKA_BROKERS, DATABASE_URL: db.url, KAFKA_TOPIC_PREFIX: topicPrefix, LOG_LEVEL: 'info' };
  proxy = await startService('inference-proxy', { ...common, INFERENCE_BACKEND: 'embedded', DEPLOYMENT_NAME: 'e2e-gw-embedded' }, 120_000);
  await ready(proxy);
  gateway = await startService(
    'gateway',
    { ...common, GATEWAY_ADMIN_TOKEN: ADMIN, INFERENCE_PROXY_URL: proxy.baseUrl, GATEWAY_POLICY_GROUP: `e2e.gwe.policy.${process.pid}` },
    120_000,
  );
  await ready(gateway);
  bus = createBus({ kind: 'kafka', brokers: KAFKA_BROKERS.split(','), clientId: 'e2e-gateway-embedded', topicPrefix });
  sub = await bus.subscribe({
    group: 'e2e.gateway-embedded.records',
    topics: [TOPICS.llmCalls],
    fromBeginning: true,
    handler: async (e) => {
      if (e.type === 'llm_call.recorded') records.set(e.payload.callId, e);
    },
  });
});

afterAll(async () => {
  await sub?.stop();
  await bus?.close();
  await Promise.all([gateway, proxy].map((s) => s?.stop('SIGTERM')));
  await db?.drop();
});

describe('gateway over the embedded engine (built-in tiny model)', () => {
  it('logs the served model, tokenizer and vocabulary in both services, and every sampled id decodes', async () => {
    expect(proxy.output()).toMatch(
      /"msg":"inference backends ready".*"model":"built-in tiny model \(random init, seed 0\)","vocabSize":272/,
    );
    expect(gateway.output()).toMatch(/"msg":"serving model".*"model":"anvil-tiny".*"tokenizer":"byte","vocabSize":272/);

    const res = await fetch(`${gateway.baseUrl}/admin/v1/sessions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ rolloutId: 'e2e-embedded-r1', groupId: 'e2e-embedded-g', taskId: 'e2e-embedded-t', model: 'anvil-tiny' }),
    });
    expect(res.status).toBe(201);
    const { apiKey, baseUrl } = (await res.json()) as { apiKey: string; baseUrl: string };
    const client = new OpenAI({ baseURL: baseUrl, apiKey: 'ignored', maxRetries: 0, timeout: 120_000 });
    const { data, response } = await client.chat.completions
      .create({
        model: 'anvil-tiny',
        messages: [{ role: 'user', content: 'Say something.' }],
        max_tokens: 48,
        n: 3,
        seed: 11,
        logprobs: true,
      })
      .withResponse();
    expect(apiKey).toMatch(/^anvil-/);
    const ids = (response.headers.get('x-anvil-call-ids') ?? '').split(',');
    expect(ids).toHaveLength(3);
    const events = await waitFor(
      '3 records',
      async () => (ids.every((id) => records.has(id)) ? ids.map((id) => records.get(id)!) : undefined),
      60_000,
      100,
    );
    const tok = new ByteTokenizer();
    let sampled = 0;
    for (const e of events) {
      for (const id of e.payload.outputIds) {
        expect(id).toBeLessThan(BYTE_VOCAB_SIZE);
        expect(tok.idToToken(id), `sampled id ${id}`).toBeDefined();
        sampled++;
      }
    }
    expect(sampled).toBeGreaterThan(3);
    for (const choice of data.choices) {
      const record = events[choice.index];
      // the reply is the decoding of the sampled ids (up to the end-of-turn id): nothing vanished
      const text = tok.decode(record.payload.outputIds.filter((id) => id !== 258 && id !== 256));
      expect(choice.message.content ?? '').toBe(text);
      expect(choice.logprobs?.content?.length).toBe(record.payload.outputIds.length - (record.payload.finishReason === 'stop' ? 1 : 0));
    }
    expect(data.usage?.completion_tokens).toBe(events.reduce((n, e) => n + e.payload.outputIds.length, 0));
  });

  it("refuses to start in front of a model whose vocabulary is not its tokenizer's (exit 78, naming both sizes)", async () => {
    const { Model } = await import('@anvil/engine');
    const dir = mkdtempSync(join(tmpdir(), 'anvil-e2e-vocab-'));
    let other: ServiceProcess | undefined;
    try {
      const m = Model.create(
        {
          vocabSize: 2048,
          hiddenSize: 32,
          intermediateSize: 64,
          numHiddenLayers: 1,
          numAttentionHeads: 2,
          numKeyValueHeads: 1,
          maxPositionEmbeddings: 256,
        },
        { seed: 1 },
      );
      await m.save(dir);
      m.dispose();
      other = await startService(
        'inference-proxy',
        { ...common, INFERENCE_BACKEND: 'embedded', EMBEDDED_CHECKPOINT_DIR: dir, DEPLOYMENT_NAME: 'e2e-gw-embedded-2048' },
        120_000,
      );
      await ready(other);
      const gw = runBuilt('gateway', {
        ...common,
        PORT: '0',
        GATEWAY_ADMIN_TOKEN: ADMIN,
        INFERENCE_PROXY_URL: other.baseUrl,
        GATEWAY_POLICY_GROUP: `e2e.gwe.policy2.${process.pid}`,
      });
      const code = await Promise.race([gw.exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 90_000))]);
      if (code === 'timeout') gw.child.kill('SIGKILL');
      expect(code).toBe(78);
      expect(gw.output()).toMatch(
        /vocabulary \(2048 ids, replica embedded, model [^)]*\) disagrees with the gateway tokenizer's \(272 ids, byte\)/,
      );
      expect(gw.output()).not.toMatch(/"msg":"listening"/);
    } finally {
      await other?.stop('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
