import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import type { DataSource } from 'typeorm';
import { PromptChain, TOPICS, type EventEnvelope, type LlmCallRecordedV1 } from '@anvil/contracts';
import { createBus, type MessageBus, type Subscription } from '@anvil/messaging';
import { createDataSource } from '@anvil/persistence';
import {
  repoRoot,
  startService,
  waitFor,
  type ServiceProcess,
  fixtureGenerate,
  type FixtureServer,
  startVllmFixture,
} from '@anvil/testing';

/**
 * The built gateway, inference-proxy (vLLM backend) and middleware as separate processes in front
 * of the vLLM protocol fixture (vocabulary 272 = the tiny byte tokenizer, so sampled ids decode),
 * on the real Kafka broker and PostgreSQL, driven by the official OpenAI SDK and by the example
 * black-box agent as its own process. Records are read back from Kafka and from the Data Pool.
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS;
const DATABASE_URL = process.env.DATABASE_URL;
if (!KAFKA_BROKERS || !DATABASE_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
const topicPrefix = `e2e-gw-${process.pid}.`;
const ADMIN = 'e2e-gateway-admin-token-0123456789abcdefghij';
const MODEL = 'anvil-tiny';
const WEIGHTS = 'tiny-e2e';

let fixture: FixtureServer;
let proxy: ServiceProcess;
let middleware: ServiceProcess;
let gateway: ServiceProcess;
let bus: MessageBus;
let sub: Subscription;
let ds: DataSource;
/** Records as received, with whole prompts rebuilt along the call chain (v2 carries deltas; a rollout's records arrive in order). */
type Recorded = Omit<EventEnvelope<'llm_call.recorded'>, 'payload'> & { payload: LlmCallRecordedV1 };
const records = new Map<string, Recorded>();
const chain = new PromptChain();
const openSessions: string[] = [];

const ready = (svc: ServiceProcess) =>
  waitFor(`${svc.app} /readyz`, async () => ((await fetch(`${svc.baseUrl}/readyz`)).status === 200 ? true : undefined), 120_000, 250);

beforeAll(async () => {
  fixture = await startVllmFixture({ vocabSize: 272, eosId: 258, weights: WEIGHTS });
  const common = { KAFKA_BROKERS, DATABASE_URL, KAFKA_TOPIC_PREFIX: topicPrefix, LOG_LEVEL: 'info' };
  [proxy, middleware] = await Promise.all([
    startService('inference-proxy', { ...common, INFERENCE_BACKEND: 'vllm', INFERENCE_REPLICAS: fixture.url, DEPLOYMENT_NAME: 'e2e-gw' }),
    startService('middleware', common),
  ]);
  gateway = await startService('gateway', {
    ...common,
    GATEWAY_ADMIN_TOKEN: ADMIN,
    INFERENCE_PROXY_URL: proxy.baseUrl,
    GATEWAY_MODEL_NAME: MODEL,
    GATEWAY_MAX_CONTEXT_TOKENS: '4096',
    MAX_REQUEST_BYTES: String(256 * 1024),
  });
  await Promise.all([ready(proxy), ready(middleware), ready(gateway)]);
  bus = createBus({ kind: 'kafka', brokers: KAFKA_BROKERS.split(','), clientId: 'e2e-gateway', topicPrefix });
  sub = await bus.subscribe({
    group: 'e2e.gateway.records',
    topics: [TOPICS.llmCalls],
    fromBeginning: true,
    handler: async (e) => {
      if (e.type === 'llm_call.recorded') records.set(e.payload.callId, { ...e, payload: chain.materialize(e.payload) });
    },
  });
  ds = createDataSource({ url: DATABASE_URL });
  await ds.initialize();
});

afterAll(async () => {
  for (const id of openSessions) await admin(`/admin/v1/sessions/${id}/close`, { method: 'POST' }).catch(() => undefined);
  await sub?.stop();
  await bus?.close();
  await ds?.destroy();
  await Promise.all([gateway, proxy, middleware].map((s) => s?.stop('SIGTERM')));
  await fixture?.close();
});

function admin(path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${gateway.baseUrl}${path}`, { ...init, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' } });
}

async function session(rolloutId: string): Promise<{ sessionId: string; apiKey: string; baseUrl: string }> {
  const res = await admin('/admin/v1/sessions', {
    method: 'POST',
    body: JSON.stringify({ rolloutId, groupId: 'e2e-group', taskId: 'e2e-task', model: MODEL }),
  });
  expect(res.status).toBe(201);
  const s = (await res.json()) as { sessionId: string; apiKey: string; baseUrl: string };
  openSessions.push(s.sessionId);
  return s;
}

const sdk = (apiKey: string, baseURL = `${gateway.baseUrl}/v1`) => new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const callIds = (res: Response) => (res.headers.get('x-anvil-call-ids') ?? '').split(',').filter(Boolean);

async function recorded(ids: string[], timeoutMs = 60_000): Promise<Recorded[]> {
  return waitFor(
    `records ${ids.length}`,
    async () => (ids.every((id) => records.has(id)) ? ids.map((id) => records.get(id)!) : undefined),
    timeoutMs,
    100,
  );
}

async function inDataPool(ids: string[]): Promise<number> {
  const rows: { n: number }[] = await ds.query('SELECT count(*)::int AS n FROM llm_calls WHERE id = ANY($1)', [ids]);
  return rows[0].n;
}

/** What the fixture engine samples for this prompt: the recorded output ids must be exactly these. */
function engineOutput(e: Recorded, maxTokens: number): number[] {
  const seed = e.payload.sampling.seed ?? 0;
  return fixtureGenerate(Array.from(e.payload.promptIds), {
    maxTokens,
    seed,
    weights: WEIGHTS,
    vocabSize: 272,
    stopIds: [258, 256],
    eosId: 258,
  }).ids;
}

describe('gateway → inference-proxy → vLLM fixture, records in Kafka and PostgreSQL', () => {
  it('captures a scripted multi-turn tool conversation token-exactly across turns', async () => {
    const s = await session('e2e-scripted');
    const client = sdk(s.apiKey);
    const tools: OpenAI.Chat.ChatCompletionTool[] = [
      {
        type: 'function',
        function: { name: 'calculator', parameters: { type: 'object', properties: { expression: { type: 'string' } } } },
      },
    ];
    // The client's own history already holds an assistant tool call and its result.
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: 'system', content: 'Use the calculator.' },
      { role: 'user', content: 'What is 2+3?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_scripted_1', type: 'function', function: { name: 'calculator', arguments: '{"expression": "2+3"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_scripted_1', content: '5' },
    ];
    const ids: string[] = [];
    const captures: (string | null)[] = [];
    for (let turn = 0; turn < 4; turn++) {
      const { data, response } = await client.chat.completions
        .create({ model: MODEL, messages, tools, max_tokens: 12, seed: 11 })
        .withResponse();
      ids.push(...callIds(response));
      captures.push(response.headers.get('x-anvil-capture'));
      messages.push(data.choices[0].message);
      messages.push(
        turn % 2 === 0
          ? { role: 'user', content: `and times ${turn + 2}?` }
          : { role: 'tool', tool_call_id: 'call_scripted_1', content: String(turn * 10) },
      );
    }
    const evs = await recorded(ids);
    expect(captures[0]).toBe('branch:first-call');
    for (let k = 0; k < evs.length; k++) {
      const p = evs[k].payload;
      // The ids the engine sampled are the ids recorded.
      expect(Array.from(p.outputIds)).toEqual(engineOutput(evs[k], 12));
      expect(Array.from(p.outputVersions).every((v) => v === 0)).toBe(true);
      if (k > 0 && captures[k]?.startsWith('extend:')) {
        const prev = evs[k - 1].payload;
        expect(p.parentCallId).toBe(prev.callId);
        // Prompt + output of turn k, then only the new messages. (An output ending in <|endoftext|>,
        // which the template closes with <|im_end|> instead, reuses all but that id: droppedStopId.)
        const full = [...prev.promptIds, ...prev.outputIds];
        const dropped = p.reusedPromptTokens === full.length - 1 && full.at(-1) === 256;
        expect(p.reusedPromptTokens === full.length || dropped).toBe(true);
        expect(Array.from(p.promptIds.slice(0, p.reusedPromptTokens))).toEqual(full.slice(0, p.reusedPromptTokens));
      }
    }
    expect(captures.filter((c) => c?.startsWith('extend:')).length).toBeGreaterThanOrEqual(2);
    await waitFor('calls in the Data Pool', async () => ((await inDataPool(ids)) === ids.length ? true : undefined), 60_000, 200);
  });

  it('runs the example black-box agent as its own process; its calls land in Kafka and PostgreSQL', async () => {
    const s = await session('e2e-agent');
    const child = spawn(
      join(repoRoot, 'node_modules', '.bin', 'tsx'),
      ['examples/calculator-agent/main.ts', '--base-url', s.baseUrl, '--turns', '4'],
      {
        cwd: repoRoot,
        env: { PATH: process.env.PATH },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const code = await new Promise<number | null>((r) => child.once('exit', r));
    expect(code, out).toBe(0);
    const summary = JSON.parse(out.trim().split('\n').pop()!) as { calls: number };
    expect(summary.calls).toBeGreaterThanOrEqual(3);
    const state = (await (await admin(`/admin/v1/sessions/${s.sessionId}`)).json()) as { callCount: number };
    expect(state.callCount).toBe(summary.calls);
    const mine = await waitFor(
      'agent records in Kafka',
      async () => {
        const evs = [...records.values()].filter((e) => e.payload.sessionId === s.sessionId);
        return evs.length === summary.calls ? evs : undefined;
      },
      60_000,
      100,
    );
    expect(mine.every((e) => e.payload.rolloutId === 'e2e-agent')).toBe(true);
    await waitFor(
      'agent calls in the Data Pool',
      async () => ((await inDataPool(mine.map((e) => e.payload.callId))) === summary.calls ? true : undefined),
      60_000,
      200,
    );
  });

  it('streams, answers n > 1 and stop strings through the real proxy', async () => {
    const s = await session('e2e-stream');
    const client = sdk(s.apiKey);
    const { data: stream, response } = await client.chat.completions
      .create({
        model: MODEL,
        messages: [{ role: 'user', content: 'stream' }],
        max_tokens: 16,
        seed: 3,
        stream: true,
        stream_options: { include_usage: true },
      })
      .withResponse();
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? '';
      if (c.usage) usage = c.usage;
    }
    const [rec] = await recorded(callIds(response));
    expect(Array.from(rec.payload.outputIds)).toEqual(engineOutput(rec, 16));
    expect(usage?.completion_tokens).toBe(rec.payload.outputIds.length);
    expect(text.length).toBeGreaterThan(0);
    const n = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'three' }], max_tokens: 8, n: 3, seed: 5 })
      .withResponse();
    expect(n.data.choices).toHaveLength(3);
    const nrecs = await recorded(callIds(n.response));
    expect(new Set(nrecs.map((r) => r.payload.branchId)).size).toBe(1);
    nrecs.forEach((r) => expect(Array.from(r.payload.outputIds)).toEqual(engineOutput(r, 8)));
  });

  it('serves 50 concurrent sessions, two turns each, every call recorded and extended token-exactly', async () => {
    const results = await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        const s = await session(`e2e-many-${i}`);
        const client = sdk(s.apiKey);
        const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: `task ${i}` }];
        const a = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, seed: i }).withResponse();
        messages.push(a.data.choices[0].message, { role: 'user', content: 'continue' });
        const b = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, seed: i }).withResponse();
        return { ids: [...callIds(a.response), ...callIds(b.response)], capture: b.response.headers.get('x-anvil-capture') };
      }),
    );
    const all = results.flatMap((r) => r.ids);
    const evs = await recorded(all, 120_000);
    expect(new Set(evs.map((e) => e.payload.rolloutId)).size).toBe(50);
    let extended = 0;
    for (const r of results) {
      const [first, second] = r.ids.map((id) => records.get(id)!.payload);
      if (r.capture === `extend:${first.callId}`) {
        extended++;
        expect(Array.from(second.promptIds.slice(0, second.reusedPromptTokens))).toEqual(
          [...first.promptIds, ...first.outputIds].slice(0, second.reusedPromptTokens),
        );
        const full = first.promptIds.length + first.outputIds.length;
        expect(second.reusedPromptTokens === full || (second.reusedPromptTokens === full - 1 && first.outputIds.at(-1) === 256)).toBe(true);
      } else expect(second.parentCallId).toBeNull();
    }
    expect(extended).toBeGreaterThanOrEqual(40);
    await waitFor('100 calls in the Data Pool', async () => ((await inDataPool(all)) === all.length ? true : undefined), 120_000, 250);
  });

  it('keeps sessions apart: cross-session keys 401, closed 410, unknown 401/404', async () => {
    const a = await session('e2e-auth-a');
    const b = await session('e2e-auth-b');
    const req = { model: MODEL, messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 4 };
    const secretB = b.apiKey.split('.').pop();
    await expect(sdk(`anvil-${a.sessionId}.${secretB}`).chat.completions.create(req)).rejects.toMatchObject({ status: 401 });
    await expect(sdk('x', `${gateway.baseUrl}/sessions/${a.sessionId}/v1`).chat.completions.create(req)).rejects.toMatchObject({
      status: 404,
    });
    await expect(sdk('not-a-key').chat.completions.create(req)).rejects.toMatchObject({ status: 401 });
    await admin(`/admin/v1/sessions/${a.sessionId}/close`, { method: 'POST' });
    await expect(sdk(a.apiKey).chat.completions.create(req)).rejects.toMatchObject({ status: 410 });
    await expect(sdk('x', b.baseUrl).chat.completions.create(req)).resolves.toBeTruthy();
  });
});

describe('fuzzing the agent API', () => {
  it('answers thousands of mutated requests with OpenAI-style errors or successes, stays up, and loses no record', async () => {
    const s = await session('e2e-fuzz');
    // Every record the earlier tests made is in Kafka; wait until the Data Pool has ingested them
    // all (answers now precede the publish, so the last ones may still be on their way).
    const before = [...records.keys()];
    await waitFor(
      'earlier records in the Data Pool',
      async () => ((await inDataPool(before)) === before.length ? true : undefined),
      30_000,
      100,
    );
    let seed = 0x2545f491;
    const rand = () => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) / 0x1_0000_0000;
    };
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)];
    const valid = () => ({ model: MODEL, messages: [{ role: 'user', content: 'fuzz' }], max_tokens: 2 });
    const weird: unknown[] = [null, true, -1, 0, 1e308, 'x', '', [], {}, [null], { role: 'user' }, '\u0000', 'ü'.repeat(50), Number.NaN];
    const keys = [
      'model',
      'messages',
      'max_tokens',
      'n',
      'stop',
      'temperature',
      'top_p',
      'seed',
      'tools',
      'tool_choice',
      'stream',
      'logprobs',
      'max_completion_tokens',
      'role',
      'content',
    ];
    const mutate = (): { body: Buffer | string; contentType: string; path: string; auth: string } => {
      const body: Record<string, unknown> = valid();
      const kind = rand();
      let text: string | Buffer;
      if (kind < 0.5) {
        for (let k = 0; k < 1 + Math.floor(rand() * 3); k++) {
          const key = pick(keys);
          const first = Array.isArray(body.messages) ? (body.messages as unknown[])[0] : null;
          if ((key === 'role' || key === 'content') && first && typeof first === 'object')
            (first as Record<string, unknown>)[key] = pick(weird);
          else body[key] = pick(weird);
        }
        text = JSON.stringify(body);
      } else if (kind < 0.75) {
        const raw = Buffer.from(JSON.stringify(body));
        for (let k = 0; k < 1 + Math.floor(rand() * 4); k++) raw[Math.floor(rand() * raw.length)] = Math.floor(rand() * 256);
        text = raw;
      } else if (kind < 0.85) text = JSON.stringify(body).slice(0, Math.floor(rand() * 40));
      else if (kind < 0.9) text = JSON.stringify({ ...body, messages: [{ role: 'user', content: 'y'.repeat(300 * 1024) }] });
      else
        text = JSON.stringify({
          ...body,
          messages: Array.from({ length: 1 + Math.floor(rand() * 5) }, () => ({
            role: pick(['user', 'assistant', 'tool', 'system']),
            content: pick(['a', null, 'ok']),
            tool_call_id: 'c',
          })),
        });
      const path =
        rand() < 0.9
          ? '/v1/chat/completions'
          : pick(['/v1/completions', '/v1/models', `/sessions/${s.apiKey}/v1/chat/completions`, '/v1/chat/completions/x']);
      return {
        body: text,
        contentType: rand() < 0.95 ? 'application/json' : pick(['text/plain', 'application/x-www-form-urlencoded']),
        path,
        auth: rand() < 0.95 ? s.apiKey : pick(['', 'garbage', `${s.apiKey}x`]),
      };
    };
    const deadline = Date.now() + 90_000;
    let sent = 0;
    const statuses = new Map<number, number>();
    const worker = async () => {
      while (sent < 2500 && Date.now() < deadline) {
        sent++;
        const m = mutate();
        const res = await fetch(`${gateway.baseUrl}${m.path}`, {
          method: m.path.endsWith('models') ? 'GET' : 'POST',
          headers: { authorization: `Bearer ${m.auth}`, 'content-type': m.contentType },
          body: m.path.endsWith('models') ? undefined : m.body,
        });
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        const text = await res.text();
        expect([200, 400, 401, 404, 410, 413, 415, 422, 429, 502, 503], text).toContain(res.status);
        if (res.status === 200) {
          if (res.headers.get('content-type')?.includes('text/event-stream')) expect(text).toContain('data: ');
          else expect(JSON.parse(text)).toHaveProperty('object');
        } else {
          const body = JSON.parse(text) as { error: { message: unknown; type: unknown; param: unknown; code: unknown } };
          expect(typeof body.error.message).toBe('string');
          expect(typeof body.error.type).toBe('string');
          expect(body.error).toHaveProperty('param');
          expect(body.error).toHaveProperty('code');
        }
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    expect(sent).toBeGreaterThanOrEqual(1000);
    expect(statuses.get(400)).toBeGreaterThan(0);
    // Still up and serving; nothing recorded before the fuzzing was lost.
    expect((await fetch(`${gateway.baseUrl}/healthz`)).status).toBe(200);
    await expect(
      sdk(s.apiKey).chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'after fuzz' }], max_tokens: 4 }),
    ).resolves.toBeTruthy();
    expect(await inDataPool(before)).toBe(before.length);
    expect(gateway.child.exitCode).toBeNull();
  });
});
