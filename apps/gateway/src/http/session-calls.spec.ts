import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sessionCallsSchema } from '@anvil/contracts';
import { tinyChatFormat } from '@anvil/tokenizer';
import { startGatewayHarness, type GatewayHarness } from '../testing/gateway-harness';

/**
 * What the rollout manager reads and sets per session through the admin API: the calls a
 * session recorded (a black-box agent's verifier scores them one by one) and the weight-swap
 * choice of its task set, forwarded on every generate request.
 */
const tok = tinyChatFormat().tokenizer;
let h: GatewayHarness;

beforeAll(async () => {
  h = await startGatewayHarness({
    script: (req) => {
      const turns = (tok.decode(req.promptIds).match(/<\|im_start\|>assistant/g) ?? []).length;
      return { ids: [...tok.encode(`reply ${turns}`), 258] };
    },
  });
});
afterAll(async () => {
  await h?.close();
});

const chat = (baseUrl: string, messages: { role: string; content: string }[], n = 1) =>
  fetch(`${baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'anvil-tiny', messages, n }),
  });

describe('admin API: session calls and the weight-swap choice', () => {
  it('lists the recorded calls in turn order with the replies the agent got (each choice of n > 1 is a call)', async () => {
    const s = await h.createSession();
    const first = await chat(s.baseUrl, [{ role: 'user', content: 'hi' }]);
    expect(first.status).toBe(200);
    const firstIds = first.headers.get('x-anvil-call-ids')?.split(',') ?? [];
    const second = await chat(
      s.baseUrl,
      [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'reply 1' },
        { role: 'user', content: 'again' },
      ],
      2,
    );
    const secondIds = second.headers.get('x-anvil-call-ids')?.split(',') ?? [];
    expect(secondIds).toHaveLength(2);
    const res = await h.admin(`/admin/v1/sessions/${s.sessionId}/calls`);
    expect(res.status).toBe(200);
    const body = sessionCallsSchema.parse(await res.json());
    expect(body.sessionId).toBe(s.sessionId);
    expect(body.calls.map((c) => c.callId)).toEqual([...firstIds, ...secondIds]);
    expect(body.calls.map((c) => c.turnIndex)).toEqual([0, 1, 2]);
    expect(body.calls.map((c) => c.message.content)).toEqual(['reply 1', 'reply 2', 'reply 2']);
    expect(body.calls.every((c) => c.message.role === 'assistant')).toBe(true);
  });

  it('an empty session lists no calls; an unknown session is 404; without the admin credential 401', async () => {
    const s = await h.createSession();
    expect(await (await h.admin(`/admin/v1/sessions/${s.sessionId}/calls`)).json()).toEqual({ sessionId: s.sessionId, calls: [] });
    expect((await h.admin('/admin/v1/sessions/sess_doesnotexist0000000/calls')).status).toBe(404);
    expect(
      (await fetch(`${h.baseUrl}/admin/v1/sessions/${s.sessionId}/calls`, { headers: { authorization: `Bearer ${s.apiKey}` } })).status,
    ).toBe(401);
  });

  it("forwards the session's weightSwap on every generate request, and sends none for a session without one", async () => {
    const resumed = await h.createSession({ weightSwap: 'abort-and-resume' });
    const finished = await h.createSession({ weightSwap: 'finish' });
    const plain = await h.createSession();
    for (const s of [resumed, finished, plain]) expect((await chat(s.baseUrl, [{ role: 'user', content: 'hi' }], 2)).status).toBe(200);
    expect(h.requestsFor(resumed.sessionId).map((r) => r.weightSwap)).toEqual(['abort-and-resume', 'abort-and-resume']);
    expect(h.requestsFor(finished.sessionId).map((r) => r.weightSwap)).toEqual(['finish', 'finish']);
    expect(h.requestsFor(plain.sessionId).map((r) => 'weightSwap' in r)).toEqual([false, false]);
    const bad = await h.admin('/admin/v1/sessions', {
      method: 'POST',
      body: JSON.stringify({ rolloutId: 'r', groupId: 'g', taskId: 't', model: 'anvil-tiny', weightSwap: 'sometimes' }),
    });
    expect(bad.status).toBe(400);
  });
});
