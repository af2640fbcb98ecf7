import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startGatewayHarness, type GatewayHarness } from '../testing/gateway-harness';

/**
 * What a new user trips over at the gateway's edge, through fetch and the official SDK against
 * the in-process gateway: body types other than JSON (415 saying what to send), error texts
 * that name the limit or the offending part once, session keys kept out of error bodies, and
 * the per-session URL refusing another session's key in the Authorization header.
 */
describe('the gateway edge as a new user meets it', () => {
  let h: GatewayHarness;
  let key: string;
  let url: string;
  const chat = { model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }] };
  const post = async (path: string, body: string, headers: Record<string, string>) => {
    const res = await fetch(`${h.baseUrl}${path}`, { method: 'POST', body, headers });
    return { status: res.status, text: await res.text() };
  };
  beforeAll(async () => {
    h = await startGatewayHarness();
    const s = await h.createSession();
    key = s.apiKey;
    url = s.baseUrl;
  });
  afterAll(() => h?.close());

  it('answers text/plain, form-encoded and undeclared bodies with 415 saying to send JSON', async () => {
    for (const [contentType, body] of [
      ['text/plain', JSON.stringify(chat)],
      ['application/x-www-form-urlencoded', 'model=anvil-tiny'],
      [undefined, JSON.stringify(chat)],
    ] as const) {
      const r = await post('/v1/chat/completions', body, {
        authorization: `Bearer ${key}`,
        ...(contentType ? { 'content-type': contentType } : {}),
      });
      expect(r.status, String(contentType)).toBe(415);
      const { error } = JSON.parse(r.text) as { error: { message: string; code: string } };
      expect(error.code).toBe('unsupported_media_type');
      expect(error.message).toContain('Content-Type: application/json');
      expect(error.message).not.toContain('undefined');
      if (contentType) expect(error.message).toContain(contentType);
    }
  });

  it('names the limit or the offending content part, once', async () => {
    const client = new OpenAI({ baseURL: `${h.baseUrl}/v1`, apiKey: key, maxRetries: 0 });
    const tooMany = await client.chat.completions
      .create({ ...chat, messages: [{ role: 'user', content: 'hi' }], stop: ['a', 'b', 'c', 'd', 'e'] })
      .catch((e: { status: number; message: string; param: string }) => e);
    expect(tooMany).toMatchObject({ status: 400, param: 'stop' });
    expect((tooMany as { message: string }).message).toContain('at most 4');
    const image = await client.chat.completions
      .create({
        model: 'anvil-tiny',
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/x.png' } }] }],
      })
      .catch((e: { status: number; message: string }) => e);
    expect(image).toMatchObject({ status: 400 });
    const message = (image as { message: string }).message;
    expect(message).toContain('content part type `image_url` is not supported');
    expect(message.split('image_url')).toHaveLength(2); // said once, not once per union branch
  });

  it('keeps the session key out of error bodies (a 404 under the per-session URL)', async () => {
    const r = await post(`/sessions/${key}/v1/no-such-route`, '{}', { 'content-type': 'application/json' });
    expect(r.status).toBe(404);
    expect(r.text).not.toContain(key);
    expect(r.text).not.toContain(key.split('.')[1]);
    expect(r.text).toContain('/sessions/<session key>/v1/no-such-route');
  });

  it("under the per-session URL refuses another session's key in Authorization (401) and ignores a placeholder", async () => {
    const other = await h.createSession();
    const wrong = await post(`/sessions/${key}/v1/chat/completions`, JSON.stringify(chat), {
      'content-type': 'application/json',
      authorization: `Bearer ${other.apiKey}`,
    });
    expect(wrong.status).toBe(401);
    expect(JSON.parse(wrong.text)).toMatchObject({ error: { code: 'invalid_api_key' } });
    expect(wrong.text).not.toContain(other.apiKey);
    const sameKey = new OpenAI({ baseURL: url, apiKey: key, maxRetries: 0 });
    await expect(
      sameKey.chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }] }),
    ).resolves.toBeTruthy();
    const placeholder = new OpenAI({ baseURL: url, apiKey: 'sk-placeholder', maxRetries: 0 });
    await expect(
      placeholder.chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }] }),
    ).resolves.toBeTruthy();
  });

  it('lists the served model without a session key under /v1, and checks the key under a per-session URL', async () => {
    const open = await fetch(`${h.baseUrl}/v1/models`);
    expect(open.status).toBe(200);
    expect(((await open.json()) as { data: { id: string }[] }).data.map((m) => m.id)).toEqual(['anvil-tiny']);
    expect((await fetch(`${h.baseUrl}/v1/models/anvil-tiny`)).status).toBe(200);
    expect((await fetch(`${url}/models`)).status).toBe(200);
    expect((await fetch(`${h.baseUrl}/sessions/anvil-sess_AAAAAAAAAAAAAAAAAAAAAA.${'A'.repeat(43)}/v1/models`)).status).toBe(404);
  });

  it('a failed generation answers 502 without internal addresses (the proxy names replicas by URL)', async () => {
    const script = h.proxy.script;
    h.proxy.script = () => ({
      ids: [],
      error: { status: 502, message: 'generation failed: http://10.0.0.5:8000: connect ECONNREFUSED 10.0.0.5:8000' },
    });
    try {
      const r = await post('/v1/chat/completions', JSON.stringify(chat), {
        'content-type': 'application/json',
        authorization: `Bearer ${key}`,
      });
      expect(r.status).toBe(502);
      expect(r.text).not.toMatch(/10\.0\.0\.5|8000/);
      expect(JSON.parse(r.text)).toMatchObject({
        error: { type: 'server_error', message: 'inference failed: generation failed: <replica>: connect ECONNREFUSED <address>' },
      });
    } finally {
      h.proxy.script = script;
    }
  });

  it('names the body limit in a 413', async () => {
    const huge = JSON.stringify({ ...chat, messages: [{ role: 'user', content: 'x'.repeat(h.config.MAX_REQUEST_BYTES) }] });
    const r = await post('/v1/chat/completions', huge, { 'content-type': 'application/json', authorization: `Bearer ${key}` });
    expect(r.status).toBe(413);
    expect(JSON.parse(r.text)).toMatchObject({
      error: { code: 'request_too_large', message: `the request body is larger than the ${h.config.MAX_REQUEST_BYTES} bytes accepted` },
    });
  });
});
