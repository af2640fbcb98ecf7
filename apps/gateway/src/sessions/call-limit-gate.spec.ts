import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataSource } from 'typeorm';
import { createLogger } from '@anvil/observability';
import { createDataSource, runMigrations } from '@anvil/persistence';
import { SqlClient } from '../db/sql-client';
import { GatewayError } from '../errors';
import { CallLimitGate, type RefusalReason } from './call-limit-gate';
import { callLimitsOf, refillWaitMs, type CallLimits } from './call-limits';
import { SessionStore } from './session-store';

/**
 * The call budget and the token bucket as the gate keeps them on the session row (PGlite, the
 * committed migrations): exact counts under concurrent admissions, also from two gates (two
 * gateway instances) at once, the bucket's refill and cap on the database's clock, and the
 * budget given back by calls that end unanswered.
 */
let ds: DataSource;
let sql: SqlClient;
let store: SessionStore;
const refusals: RefusalReason[] = [];
const gate = () =>
  new CallLimitGate(sql, { onRefused: (r) => refusals.push(r), logger: createLogger({ service: 'gateway', level: 'error' }) });
let sessions = 0;

beforeAll(async () => {
  ds = createDataSource();
  await ds.initialize();
  await runMigrations(ds);
  sql = new SqlClient(ds);
  store = new SessionStore(ds, sql);
}, 120_000);
afterAll(async () => {
  await ds?.destroy();
});

async function session(limits: Partial<CallLimits>) {
  const id = `sess-${++sessions}`;
  await store.create({
    id,
    keyHash: 'x'.repeat(64),
    rolloutId: `r-${sessions}`,
    groupId: 'g',
    taskId: 't',
    model: 'anvil-tiny',
    maxContextTokens: null,
    expiresAt: null,
    weightSwap: null,
    maxCalls: null,
    callsPerSecond: null,
    callBurst: null,
    ...limits,
  });
  const s = await store.find(id);
  if (!s) throw new Error('session not stored');
  return s;
}

/** Every admission's outcome: 'ok', or the 429's code. */
const outcome = (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => 'ok',
    (err: unknown) => (err instanceof GatewayError ? err.code : String(err)),
  );

/** The bucket's clock moved back by `s` seconds: as if that much time had passed since its last change. */
const age = (id: string, s: number) =>
  ds.query(`UPDATE "gateway_sessions" SET "rate_at" = "rate_at" - make_interval(secs => $2) WHERE "id" = $1`, [id, s]);

describe('the call budget', () => {
  it('admits exactly maxCalls of many concurrent calls and counts every refusal on the row', async () => {
    const s = await session({ maxCalls: 10 });
    const g = gate();
    const out = await Promise.all(Array.from({ length: 40 }, () => outcome(g.admit(s, 1))));
    expect(out.filter((o) => o === 'ok')).toHaveLength(10);
    expect(out.filter((o) => o === 'insufficient_quota')).toHaveLength(30);
    const row = await store.find(s.id);
    expect(row).toMatchObject({ callsAdmitted: 10, refusedBudget: 30, refusedRate: 0 });
  });

  it('holds across two gateway instances sharing the database', async () => {
    const s = await session({ maxCalls: 25 });
    const [a, b] = [gate(), gate()];
    const out = await Promise.all(Array.from({ length: 60 }, (_, i) => outcome((i % 2 ? a : b).admit(s, 1))));
    expect(out.filter((o) => o === 'ok')).toHaveLength(25);
    expect(await store.find(s.id)).toMatchObject({ callsAdmitted: 25, refusedBudget: 35 });
  });

  it('counts each choice of an n > 1 request, and says how many are left when a request asks for more', async () => {
    const s = await session({ maxCalls: 5 });
    const g = gate();
    await g.admit(s, 3);
    const err = await g.admit(s, 3).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GatewayError);
    expect((err as GatewayError).message).toMatch(/may make 5 LLM calls \(this request asks for 3 choices; 2 calls are left\)/);
    await g.admit(s, 2);
    expect(await outcome(g.admit(s, 1))).toBe('insufficient_quota');
    expect(await store.find(s.id)).toMatchObject({ callsAdmitted: 5, refusedBudget: 2 });
  });

  it('takes back the calls of a request that ended unanswered', async () => {
    const s = await session({ maxCalls: 2 });
    const g = gate();
    const first = await g.admit(s, 2);
    expect(await outcome(g.admit(s, 1))).toBe('insufficient_quota');
    await first.release();
    expect((await store.find(s.id))?.callsAdmitted).toBe(0);
    expect(await outcome(g.admit(s, 1))).toBe('ok');
  });

  it('answers a spent budget as final: OpenAI quota error, x-should-retry false, no Retry-After', async () => {
    const s = await session({ maxCalls: 1 });
    const g = gate();
    await g.admit(s, 1);
    const err = (await g.admit(s, 1).catch((e: unknown) => e)) as GatewayError;
    expect(err).toMatchObject({ kind: 'over_limit', code: 'insufficient_quota', retryAfterS: undefined });
    expect(err.extra).toEqual({ type: 'insufficient_quota', headers: { 'x-should-retry': 'false' } });
  });
});

describe('the rate limit (token bucket)', () => {
  it('lets a full bucket through at once, then refuses with the time until the next token', async () => {
    const s = await session({ callsPerSecond: 1, callBurst: 5 });
    const g = gate();
    const before = refusals.length;
    const out = await Promise.all(Array.from({ length: 12 }, () => outcome(g.admit(s, 1))));
    expect(out.filter((o) => o === 'ok')).toHaveLength(5);
    expect(out.filter((o) => o === 'rate_limit_exceeded')).toHaveLength(7);
    expect(refusals.slice(before)).toEqual(Array(7).fill('rate'));
    const err = (await g.admit(s, 1).catch((e: unknown) => e)) as GatewayError;
    // Empty a moment ago, refilled at 1/s: about a second to the next token (Retry-After whole seconds, -ms exact).
    const ms = Number(err.extra.headers?.['retry-after-ms']);
    expect(ms).toBeGreaterThan(500);
    expect(ms).toBeLessThanOrEqual(1000);
    expect(err.retryAfterS).toBe(1);
    expect(await store.find(s.id)).toMatchObject({ refusedRate: 8, refusedBudget: 0 });
  });

  it('refills at the rate on the database clock, and never beyond the burst', async () => {
    const s = await session({ callsPerSecond: 2, callBurst: 3 });
    const g = gate();
    const drain = await Promise.all(Array.from({ length: 4 }, () => outcome(g.admit(s, 1))));
    expect(drain.filter((o) => o === 'ok')).toHaveLength(3);
    await age(s.id, 1.1); // 2.2 tokens
    const after = await Promise.all(Array.from({ length: 4 }, () => outcome(g.admit(s, 1))));
    expect(after.filter((o) => o === 'ok')).toHaveLength(2);
    await age(s.id, 3600); // an hour idle: still only the burst
    const later = await Promise.all(Array.from({ length: 6 }, () => outcome(g.admit(s, 1))));
    expect(later.filter((o) => o === 'ok')).toHaveLength(3);
  });

  it('takes n tokens for n choices, and refuses a request larger than the burst as a bad request', async () => {
    const s = await session({ callsPerSecond: 1, callBurst: 4 });
    const g = gate();
    await g.admit(s, 3);
    expect(await outcome(g.admit(s, 2))).toBe('rate_limit_exceeded');
    expect(await outcome(g.admit(s, 1))).toBe('ok');
    const err = (await g.admit(s, 5).catch((e: unknown) => e)) as GatewayError;
    expect(err).toMatchObject({ kind: 'invalid_request', param: 'n' });
  });

  it('does not give tokens back with an unanswered call (the backend was asked all the same)', async () => {
    const s = await session({ maxCalls: 10, callsPerSecond: 1, callBurst: 1 });
    const g = gate();
    const a = await g.admit(s, 1);
    await a.release();
    expect(await outcome(g.admit(s, 1))).toBe('rate_limit_exceeded');
    expect(await store.find(s.id)).toMatchObject({ callsAdmitted: 0, refusedRate: 1 });
  });

  it('judges the budget first: a spent budget is refused as spent even when the bucket is empty too', async () => {
    const s = await session({ maxCalls: 1, callsPerSecond: 1, callBurst: 1 });
    const g = gate();
    await g.admit(s, 1);
    expect(await outcome(g.admit(s, 1))).toBe('insufficient_quota');
    expect(await store.find(s.id)).toMatchObject({ refusedBudget: 1, refusedRate: 0 });
  });
});

describe('a session closed after its call was authenticated', () => {
  it('refuses the call as closed (410) and leaves its counts as they were at the close', async () => {
    const s = await session({ maxCalls: 1, callsPerSecond: 1, callBurst: 1 });
    const g = gate();
    await g.admit(s, 1);
    await store.close(s.id, 'closed');
    const closed = await store.find(s.id);
    for (let i = 0; i < 3; i++) expect(await outcome(g.admit(s, 1))).toBe('session_closed');
    expect(await store.find(s.id)).toMatchObject({ callsAdmitted: 1, refusedBudget: 0, refusedRate: 0, rateAt: closed?.rateAt });
  });
});

describe('sessions without limits', () => {
  it('are admitted without touching the row', async () => {
    const s = await session({});
    const g = gate();
    await Promise.all(Array.from({ length: 20 }, () => g.admit(s, 1)));
    expect(await store.find(s.id)).toMatchObject({ callsAdmitted: 0, refusedBudget: 0, refusedRate: 0 });
  });
});

describe('limits at session creation', () => {
  it('default the burst to one second of calls (at least one); a burst without a rate is refused', () => {
    expect(callLimitsOf({})).toEqual({ maxCalls: null, callsPerSecond: null, callBurst: null });
    expect(callLimitsOf({ maxCalls: 256, callsPerSecond: 2.5 })).toEqual({ maxCalls: 256, callsPerSecond: 2.5, callBurst: 3 });
    expect(callLimitsOf({ callsPerSecond: 0.2 })).toMatchObject({ callBurst: 1 });
    expect(callLimitsOf({ callsPerSecond: 10, callBurst: 40 })).toMatchObject({ callBurst: 40 });
    expect(() => callLimitsOf({ callBurst: 4 })).toThrow(/callBurst needs callsPerSecond/);
  });

  it('the wait for n tokens is what the rate refills of the missing part', () => {
    expect(refillWaitMs(0.25, 1, 2)).toBe(375);
    expect(refillWaitMs(0, 3, 10)).toBe(300);
    expect(refillWaitMs(5, 1, 1)).toBe(0);
  });
});
