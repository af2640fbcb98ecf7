import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeSessionsResponseSchema, createSessionsResponseSchema, sessionStateSchema } from '@anvil/contracts';
import { startGatewayHarness, type GatewayHarness } from '../testing/gateway-harness';

/**
 * The admin batch routes the rollout manager opens and closes sessions with: one request and one
 * statement for many sessions, each as usable as one opened alone; all or none on a bad entry;
 * closing is idempotent and leaves unknown ids out.
 */
let h: GatewayHarness;
beforeAll(async () => {
  h = await startGatewayHarness();
});
afterAll(async () => {
  await h?.close();
});

const entry = (i: number, extra: Record<string, unknown> = {}) => ({
  rolloutId: `batch-r${i}`,
  groupId: 'batch-g',
  taskId: 'batch-t',
  model: 'anvil-tiny',
  ...extra,
});
const chat = (baseUrl: string) =>
  fetch(`${baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }] }),
  });

describe('admin batch routes', () => {
  it('opens many sessions in order, each with its own key, expiry and weight-swap choice, and closes them together', async () => {
    const expiresAt = Date.now() + 60_000;
    const res = await h.admin('/admin/v1/sessions/batch', {
      method: 'POST',
      body: JSON.stringify({
        sessions: [entry(0), entry(1, { expiresAt, weightSwap: 'abort-and-resume' }), entry(2, { maxContextTokens: 100 })],
      }),
    });
    expect(res.status).toBe(201);
    const { sessions } = createSessionsResponseSchema.parse(await res.json());
    expect(sessions).toHaveLength(3);
    expect(new Set(sessions.map((s) => s.apiKey)).size).toBe(3);
    const states = await Promise.all(
      sessions.map(async (s) => sessionStateSchema.parse(await (await h.admin(`/admin/v1/sessions/${s.sessionId}`)).json())),
    );
    expect(states.map((s) => s.rolloutId)).toEqual(['batch-r0', 'batch-r1', 'batch-r2']);
    expect(states.every((s) => s.status === 'open' && s.callCount === 0)).toBe(true);
    expect(states[1].expiresAt).toBe(expiresAt);
    for (const s of sessions) expect((await chat(s.baseUrl)).status).toBe(200);
    expect(h.requestsFor(sessions[1].sessionId)[0].weightSwap).toBe('abort-and-resume');
    expect('weightSwap' in h.requestsFor(sessions[0].sessionId)[0]).toBe(false);

    const closed = await h.admin('/admin/v1/sessions/batch/close', {
      method: 'POST',
      body: JSON.stringify({ sessionIds: [...sessions.map((s) => s.sessionId), 'sess_doesnotexist0000000'] }),
    });
    expect(closed.status).toBe(200);
    const after = closeSessionsResponseSchema.parse(await closed.json()).sessions;
    expect(after.map((s) => s.sessionId).sort()).toEqual(sessions.map((s) => s.sessionId).sort());
    expect(after.every((s) => s.status === 'closed' && s.callCount === 1 && s.closeReason === 'closed')).toBe(true);
    // With their calls: read after the close, each session's in turn order.
    const withCalls = closeSessionsResponseSchema.parse(
      await (
        await h.admin('/admin/v1/sessions/batch/close', {
          method: 'POST',
          body: JSON.stringify({ sessionIds: [sessions[1].sessionId, sessions[2].sessionId], withCalls: true }),
        })
      ).json(),
    );
    expect(withCalls.sessions.map((x) => [x.sessionId, x.calls?.length, x.calls?.[0].message.role])).toEqual(
      expect.arrayContaining([
        [sessions[1].sessionId, 1, 'assistant'],
        [sessions[2].sessionId, 1, 'assistant'],
      ]),
    );
    expect(after.every((x) => x.calls === undefined)).toBe(true);
    // Closed is closed: the keys open nothing now, and closing again changes nothing.
    expect((await chat(sessions[0].baseUrl)).status).not.toBe(200);
    const again = closeSessionsResponseSchema.parse(
      await (
        await h.admin('/admin/v1/sessions/batch/close', { method: 'POST', body: JSON.stringify({ sessionIds: [sessions[0].sessionId] }) })
      ).json(),
    );
    expect(again.sessions[0].closedAt).toBe(after.find((s) => s.sessionId === sessions[0].sessionId)?.closedAt);
  });

  it('refuses the whole batch for one bad entry (nothing opened), an empty batch, and callers without the admin credential', async () => {
    const before = await h.ds.query(`SELECT count(*)::int AS n FROM gateway_sessions`);
    const bad = await h.admin('/admin/v1/sessions/batch', {
      method: 'POST',
      body: JSON.stringify({ sessions: [entry(10), entry(11, { model: 'gpt-9' })] }),
    });
    expect(bad.status).toBe(404);
    const past = await h.admin('/admin/v1/sessions/batch', {
      method: 'POST',
      body: JSON.stringify({ sessions: [entry(12), entry(13, { expiresAt: 1 })] }),
    });
    expect(past.status).toBe(400);
    expect((await h.admin('/admin/v1/sessions/batch', { method: 'POST', body: JSON.stringify({ sessions: [] }) })).status).toBe(400);
    expect(await h.ds.query(`SELECT count(*)::int AS n FROM gateway_sessions`)).toEqual(before);
    const anon = await fetch(`${h.baseUrl}/admin/v1/sessions/batch`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sessions: [entry(14)] }),
    });
    expect(anon.status).toBe(401);
    expect(
      (
        await fetch(`${h.baseUrl}/admin/v1/sessions/batch/close`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: '{"sessionIds":["x"]}',
        })
      ).status,
    ).toBe(401);
  });
});
