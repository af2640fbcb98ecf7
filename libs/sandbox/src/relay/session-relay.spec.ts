// The host side of the session relay on its own (the sandboxes' tests reach it from inside).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRecordingGateway, type RecordingGateway } from '../testing/recording-gateway';
import { startSessionRelay } from './session-relay';

let gateway: RecordingGateway;
beforeAll(async () => {
  gateway = await startRecordingGateway();
});
afterAll(() => gateway?.close());

describe('startSessionRelay', () => {
  it('forwards a request body and the answer unchanged, with only the credentials replaced', async () => {
    const session = gateway.session();
    const relay = await startSessionRelay(session, { loopbackPort: 0 });
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(200_000) }] });
    const res = await fetch(`${relay.address}/v1/chat/completions?trace=1`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: 'Bearer anything',
        'x-custom': 'kept',
        'proxy-authorization': 'Basic eA==',
      },
      body,
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { choices: Array<{ message: { content: string } }> }).choices[0].message.content).toBe(
      `answered on /sessions/${session.apiKey}/v1/chat/completions?trace=1`,
    );
    const [seen] = gateway.requestsOf(session.apiKey);
    expect(seen.body).toBe(body);
    expect(seen.headers).toMatchObject({
      authorization: `Bearer ${session.apiKey}`,
      'x-custom': 'kept',
      host: new URL(gateway.origin).host,
    });
    expect(seen.headers['proxy-authorization']).toBeUndefined();
    expect(relay.stats).toEqual({ forwarded: 1, refused: 0, refusedRequests: [] });
    await relay.close();
  });

  it('answers 403 itself, naming why, with any session key in its record redacted', async () => {
    const session = gateway.session();
    const other = gateway.session();
    const relay = await startSessionRelay(session, { loopbackPort: 0 });
    const before = gateway.requests.length;
    const res = await fetch(`${relay.address}/sessions/${other.apiKey}/v1/models`);
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({
      error: {
        message: 'sandbox relay: only the session API (/v1/...) is reachable, not /sessions/<key>/v1/models',
        type: 'sandbox_relay_refused',
        code: 403,
      },
    });
    expect(gateway.requests.length).toBe(before);
    expect(relay.stats.refusedRequests).toEqual([
      'GET /sessions/<key>/v1/models: only the session API (/v1/...) is reachable, not /sessions/<key>/v1/models',
    ]);
    await relay.close();
  });

  it('a gateway that is down is a 502 for the program, not a hang', async () => {
    const down = await startRecordingGateway();
    const session = down.session();
    await down.close();
    const relay = await startSessionRelay(session, { loopbackPort: 0 });
    const res = await fetch(`${relay.address}/v1/models`);
    expect(res.status).toBe(502);
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe('bad_gateway');
    await relay.close();
  });
});
