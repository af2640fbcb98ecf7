import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetSpentResponseSchema, sessionStateSchema } from '@anvil/contracts';
import { tinyChatFormat } from '@anvil/tokenizer';
import { sessionRecords, startGatewayHarness, type GatewayHarness } from '../testing/gateway-harness';

/**
 * A session's call budget and rate limit at the HTTP edge: the excess is refused with 429 in the
 * error shape of the API it came through (OpenAI's for chat completions, completions and
 * Responses; Anthropic's for Messages), with Retry-After for the rate limit and a final "budget
 * spent" for the budget; refused calls reach no engine and are recorded nowhere, only counted
 * (session state, metrics); the official SDKs stop at a spent budget and wait out a rate limit.
 */
const tok = tinyChatFormat().tokenizer;
let h: GatewayHarness;
let failNext = 0;

beforeAll(async () => {
  h = await startGatewayHarness({
    script: () => {
      if (failNext > 0) {
        failNext--;
        return { ids: [], error: { status: 500, message: 'engine fell over (test)' } };
      }
      return { ids: [...tok.encode('fine'), 258] };
    },
  });
});
afterAll(async () => {
  await h?.close();
});

type Api = 'chat' | 'completions' | 'responses' | 'messages';
const PATHS: Record<Api, string> = { chat: 'chat/completions', completions: 'completions', responses: 'responses', messages: 'messages' };
const BODIES: Record<Api, Record<string, unknown>> = {
  chat: { model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 },
  completions: { model: 'anvil-tiny', prompt: 'hi', max_tokens: 8 },
  responses: { model: 'anvil-tiny', input: 'hi', max_output_tokens: 8 },
  messages: { model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 },
};

async function call(s: { baseUrl: string }, api: Api, extra: Record<string, unknown> = {}) {
  const res = await fetch(`${s.baseUrl}/${PATHS[api]}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(api === 'messages' ? { 'anthropic-version': '2023-06-01' } : {}) },
    body: JSON.stringify({ ...BODIES[api], ...extra }),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: JSON.parse(text) as Record<string, unknown> };
}

async function state(sessionId: string) {
  return sessionStateSchema.parse(await (await h.admin(`/admin/v1/sessions/${sessionId}`)).json());
}

/** The calls recorded for a session (its llm_call.recorded events, what training reads), once the bus has delivered `n`: exactly `n`. */
async function recorded(sessionId: string, n: number): Promise<number> {
  await sessionRecords(h, sessionId, n);
  await new Promise((r) => setTimeout(r, 50));
  return h.records.filter((r) => r.payload.sessionId === sessionId).length;
}

const refusedMetric = async (reason: string): Promise<number> => {
  const text = await (await fetch(`${h.baseUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('anvil_gateway_calls_refused_total{') && l.includes(`reason="${reason}"`));
  return line ? Number(line.split(' ').at(-1)) : 0;
};

describe('a spent call budget', () => {
  it.each<Api>(['chat', 'completions', 'responses'])("%s: 429 insufficient_quota in OpenAI's shape, not to be retried", async (api) => {
    const s = await h.createSession({ maxCalls: 2 });
    expect((await call(s, api)).status).toBe(200);
    expect((await call(s, api)).status).toBe(200);
    const refused = await call(s, api);
    expect(refused.status).toBe(429);
    expect(refused.body).toEqual({
      error: {
        type: 'insufficient_quota',
        code: 'insufficient_quota',
        param: null,
        message: expect.stringMatching(/call budget is spent: it may make 2 LLM calls/),
      },
    });
    expect(refused.headers.get('x-should-retry')).toBe('false');
    expect(refused.headers.get('retry-after')).toBeNull();
    // Refused before the engine: two generations, two records.
    expect(h.requestsFor(s.sessionId)).toHaveLength(2);
    expect(await recorded(s.sessionId, 2)).toBe(2);
    expect(await state(s.sessionId)).toMatchObject({ maxCalls: 2, callsAdmitted: 2, callCount: 2, callsRefused: { budget: 1, rate: 0 } });
  });

  it("messages: 429 rate_limit_error in Anthropic's shape, not to be retried", async () => {
    const s = await h.createSession({ maxCalls: 1 });
    expect((await call(s, 'messages')).status).toBe(200);
    const refused = await call(s, 'messages');
    expect(refused.status).toBe(429);
    expect(refused.body).toEqual({
      type: 'error',
      error: { type: 'rate_limit_error', message: expect.stringMatching(/call budget is spent/) },
    });
    expect(refused.headers.get('x-should-retry')).toBe('false');
    expect(h.requestsFor(s.sessionId)).toHaveLength(1);
    expect(await recorded(s.sessionId, 1)).toBe(1);
  });

  it('a streamed request is refused before its stream opens, as a plain 429', async () => {
    const s = await h.createSession({ maxCalls: 1 });
    expect((await call(s, 'chat')).status).toBe(200);
    const refused = await call(s, 'chat', { stream: true });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('content-type')).toMatch(/application\/json/);
    expect((refused.body.error as { code: string }).code).toBe('insufficient_quota');
  });

  it('the official SDKs stop at once (one request, no retries) and the session next to it is unaffected', async () => {
    const s = await h.createSession({ maxCalls: 1 });
    const beside = await h.createSession({ maxCalls: 1 });
    const openai = new OpenAI({ baseURL: s.baseUrl, apiKey: 'placeholder', maxRetries: 3 });
    await openai.chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 });
    await expect(
      openai.chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'again' }], max_tokens: 8 }),
    ).rejects.toMatchObject({ status: 429, code: 'insufficient_quota' });
    const anthropic = new Anthropic({ baseURL: s.baseUrl.replace(/\/v1$/, ''), apiKey: 'placeholder', maxRetries: 3 });
    await expect(
      anthropic.messages.create({ model: 'anvil-tiny', max_tokens: 8, messages: [{ role: 'user', content: 'again' }] }),
    ).rejects.toMatchObject({ status: 429 });
    // One refusal per SDK call: neither retried.
    expect((await state(s.sessionId)).callsRefused).toEqual({ budget: 2, rate: 0 });
    expect((await call(beside, 'chat')).status).toBe(200);
    expect((await state(beside.sessionId)).callsRefused).toEqual({ budget: 0, rate: 0 });
  });

  it('a call that fails unanswered gives its place back', async () => {
    const s = await h.createSession({ maxCalls: 1 });
    failNext = 1;
    expect((await call(s, 'chat')).status).toBe(502);
    expect((await state(s.sessionId)).callsAdmitted).toBe(0);
    expect((await call(s, 'chat')).status).toBe(200);
    expect(await state(s.sessionId)).toMatchObject({ callsAdmitted: 1, callCount: 1 });
  });

  it('the admin API names the sessions whose agents asked past their budget, and only those', async () => {
    const spent = await h.createSession({ maxCalls: 1 });
    const within = await h.createSession({ maxCalls: 1 });
    const free = await h.createSession();
    for (const s of [spent, within, free]) expect((await call(s, 'chat')).status).toBe(200);
    expect((await call(spent, 'chat')).status).toBe(429);
    expect((await call(free, 'chat')).status).toBe(200);
    const res = await h.admin('/admin/v1/sessions/batch/budget-spent', {
      method: 'POST',
      body: JSON.stringify({ sessionIds: [spent.sessionId, within.sessionId, free.sessionId, 'nope'] }),
    });
    expect(res.status).toBe(200);
    expect(budgetSpentResponseSchema.parse(await res.json())).toEqual({
      sessions: [{ sessionId: spent.sessionId, callsRefused: { budget: 1, rate: 0 } }],
    });
    const unauthorized = await fetch(`${h.baseUrl}/admin/v1/sessions/batch/budget-spent`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sessionIds: [spent.sessionId] }),
    });
    expect(unauthorized.status).toBe(401);
  });
});

describe('the rate limit', () => {
  it.each<Api>(['chat', 'completions', 'responses', 'messages'])(
    "%s: 429 with Retry-After (whole seconds) and retry-after-ms in the API's shape",
    async (api) => {
      const s = await h.createSession({ callsPerSecond: 0.5, callBurst: 1 });
      expect((await call(s, api)).status).toBe(200);
      const refused = await call(s, api);
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get('retry-after'))).toBe(2);
      const ms = Number(refused.headers.get('retry-after-ms'));
      expect(ms).toBeGreaterThan(1000);
      expect(ms).toBeLessThanOrEqual(2000);
      expect(refused.headers.get('x-should-retry')).toBeNull();
      const message = expect.stringMatching(/over its rate limit of 0.5 calls per second \(bursts of 1\)/);
      expect(refused.body).toEqual(
        api === 'messages'
          ? { type: 'error', error: { type: 'rate_limit_error', message } }
          : { error: { type: 'rate_limit_error', code: 'rate_limit_exceeded', param: null, message } },
      );
      expect(h.requestsFor(s.sessionId)).toHaveLength(1);
      expect(await recorded(s.sessionId, 1)).toBe(1);
      expect((await state(s.sessionId)).callsRefused).toEqual({ budget: 0, rate: 1 });
    },
  );

  it('the OpenAI SDK waits as told and gets its answer', async () => {
    const s = await h.createSession({ callsPerSecond: 5, callBurst: 1 });
    const openai = new OpenAI({ baseURL: s.baseUrl, apiKey: 'placeholder', maxRetries: 3 });
    const t0 = performance.now();
    for (let i = 0; i < 3; i++)
      await openai.chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: `hi ${i}` }], max_tokens: 8 });
    // Three calls at 5/s from a bucket of one: at least two refills of 200 ms.
    expect(performance.now() - t0).toBeGreaterThanOrEqual(390);
    const st = await state(s.sessionId);
    expect(st.callCount).toBe(3);
    expect(st.callsRefused?.rate).toBeGreaterThanOrEqual(1);
  });

  it('a request for more choices than the burst can never pass: 400 naming n', async () => {
    const s = await h.createSession({ callsPerSecond: 1, callBurst: 2 });
    const res = await call(s, 'chat', { n: 3 });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ param: 'n', message: expect.stringMatching(/more calls than this session's rate limit/) });
    expect((await state(s.sessionId)).callsRefused).toEqual({ budget: 0, rate: 0 });
  });
});

describe('counting and creating', () => {
  it('refusals are counted in the metrics by reason', async () => {
    const [budget0, rate0] = [await refusedMetric('budget'), await refusedMetric('rate')];
    const b = await h.createSession({ maxCalls: 1 });
    const r = await h.createSession({ callsPerSecond: 0.1 });
    for (const s of [b, r]) {
      expect((await call(s, 'chat')).status).toBe(200);
      expect((await call(s, 'chat')).status).toBe(429);
      expect((await call(s, 'chat')).status).toBe(429);
    }
    expect(await refusedMetric('budget')).toBe(budget0 + 2);
    expect(await refusedMetric('rate')).toBe(rate0 + 2);
  });

  it('a session is created with its limits (alone and in a batch); bad limits are refused with 400', async () => {
    const s = await h.createSession({ maxCalls: 7, callsPerSecond: 2.5 });
    expect(await state(s.sessionId)).toMatchObject({ maxCalls: 7, callsPerSecond: 2.5, callBurst: 3, callsAdmitted: 0 });
    const batch = await h.admin('/admin/v1/sessions/batch', {
      method: 'POST',
      body: JSON.stringify({
        sessions: [
          { rolloutId: 'rb-1', groupId: 'g', taskId: 't', model: 'anvil-tiny', maxCalls: 3, callsPerSecond: 4, callBurst: 8 },
          { rolloutId: 'rb-2', groupId: 'g', taskId: 't', model: 'anvil-tiny' },
        ],
      }),
    });
    expect(batch.status).toBe(201);
    const [withLimits, without] = ((await batch.json()) as { sessions: { sessionId: string }[] }).sessions;
    expect(await state(withLimits.sessionId)).toMatchObject({ maxCalls: 3, callsPerSecond: 4, callBurst: 8 });
    expect(await state(without.sessionId)).toMatchObject({ maxCalls: null, callsPerSecond: null, callBurst: null });
    const bad = async (limits: Record<string, unknown>) =>
      (
        await h.admin('/admin/v1/sessions', {
          method: 'POST',
          body: JSON.stringify({ rolloutId: 'r', groupId: 'g', taskId: 't', model: 'anvil-tiny', ...limits }),
        })
      ).status;
    expect(await bad({ callBurst: 4 })).toBe(400);
    expect(await bad({ maxCalls: 0 })).toBe(400);
    expect(await bad({ maxCalls: 1.5 })).toBe(400);
    expect(await bad({ callsPerSecond: -1 })).toBe(400);
  });
});
