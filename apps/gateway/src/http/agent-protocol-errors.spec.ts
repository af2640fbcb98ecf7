import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tinyChatFormat } from '@anvil/tokenizer';
import { startGatewayHarness, type GatewayHarness } from '../testing/gateway-harness';

/**
 * Bad input at the Responses and Messages routes: each gets its provider's error shape and
 * status, nothing reaches the engine, nothing is recorded, the process stays up, and the same
 * session answers its next good call.
 */
const tok = tinyChatFormat().tokenizer;
const script = () => ({ ids: [...tok.encode('fine'), 258] });
const MiB = 1024 * 1024;

describe('bad input at /v1/responses and /v1/messages', () => {
  let h: GatewayHarness;
  let s: { sessionId: string; apiKey: string; baseUrl: string };
  beforeAll(async () => {
    h = await startGatewayHarness({ script, env: { MAX_REQUEST_BYTES: String(8 * MiB) } });
    s = await h.createSession();
  });
  afterAll(() => h?.close());

  const post = async (path: string, body: string | Buffer, headers: Record<string, string> = {}) => {
    const res = await fetch(`${h.baseUrl}${path}`, {
      method: 'POST',
      body,
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${s.apiKey}`,
        ...(path.includes('/messages') ? { 'anthropic-version': '2023-06-01' } : {}),
        ...headers,
      },
    });
    const text = await res.text();
    return { status: res.status, body: JSON.parse(text) as Record<string, unknown> };
  };
  const responses = (body: unknown) => post('/v1/responses', JSON.stringify(body));
  const messages = (body: unknown, headers: Record<string, string> = {}) => post('/v1/messages', JSON.stringify(body), headers);
  const openAiError = (code: string | null, status = 400) => ({
    status,
    body: { error: expect.objectContaining({ type: expect.any(String), code }) },
  });
  const anthropicError = (type: string, status: number) => ({
    status,
    body: { type: 'error', error: { type, message: expect.any(String) } },
  });

  /** Runs `bad`, then checks nothing was generated or recorded, and that the session still answers. */
  async function refusedCleanly(bad: () => Promise<unknown>): Promise<void> {
    const generated = h.requestsFor(s.sessionId).length;
    const recorded = h.records.length;
    await bad();
    await new Promise((r) => setTimeout(r, 50));
    expect(h.requestsFor(s.sessionId).length).toBe(generated);
    expect(h.records.length).toBe(recorded);
    const ok = await messages({ model: 'anvil-tiny', max_tokens: 8, messages: [{ role: 'user', content: 'still there?' }] });
    expect(ok.status).toBe(200);
    const ok2 = await responses({ model: 'anvil-tiny', input: 'still there?' });
    expect(ok2.status).toBe(200);
  }

  it('unknown item and block types', async () => {
    await refusedCleanly(async () => {
      expect(await responses({ model: 'anvil-tiny', input: [{ type: 'computer_call', id: 'x' }] })).toMatchObject(
        openAiError('unsupported_item_type'),
      );
      const image = await responses({
        model: 'anvil-tiny',
        input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://x/y.png' }] }],
      });
      expect(image).toMatchObject({ status: 400, body: { error: { param: 'input[0].content[0].type' } } });
      expect(
        await messages({ model: 'anvil-tiny', max_tokens: 8, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }),
      ).toMatchObject(anthropicError('invalid_request_error', 400));
      expect(
        await messages({
          model: 'anvil-tiny',
          max_tokens: 8,
          messages: [{ role: 'assistant', content: [{ type: 'server_tool_use', id: 'x' }] }],
        }),
      ).toMatchObject(anthropicError('invalid_request_error', 400));
    });
  });

  it('a function_call_output or tool_result naming an id that was never issued', async () => {
    await refusedCleanly(async () => {
      const r = await responses({
        model: 'anvil-tiny',
        input: [
          { role: 'user', content: 'hi' },
          { type: 'function_call_output', call_id: 'call_nope', output: '1' },
        ],
      });
      expect(r).toMatchObject(openAiError('unknown_call_id'));
      expect(String((r.body.error as { message: string }).message)).toContain('call_nope');
      const m = await messages({
        model: 'anvil-tiny',
        max_tokens: 8,
        messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_nope', content: '1' }] }],
      });
      expect(m).toMatchObject(anthropicError('invalid_request_error', 400));
      expect(JSON.stringify(m.body)).toContain('toolu_nope');
    });
  });

  it("a previous_response_id that does not exist, or is another session's", async () => {
    const other = await h.createSession();
    const theirs = await post('/v1/responses', JSON.stringify({ model: 'anvil-tiny', input: 'mine' }), {
      authorization: `Bearer ${other.apiKey}`,
    });
    expect(theirs.status).toBe(200);
    await refusedCleanly(async () => {
      for (const id of ['resp_doesnotexist', theirs.body.id as string]) {
        const r = await responses({ model: 'anvil-tiny', input: 'go on', previous_response_id: id });
        expect(r).toMatchObject({ status: 400, body: { error: { code: 'previous_response_not_found', param: 'previous_response_id' } } });
        const get = await fetch(`${h.baseUrl}/v1/responses/${id}`, { headers: { authorization: `Bearer ${s.apiKey}` } });
        expect(get.status).toBe(404);
      }
    });
  });

  it('missing max_tokens on /v1/messages, and a wrong key in x-api-key', async () => {
    await refusedCleanly(async () => {
      const r = await messages({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }] });
      expect(r).toMatchObject(anthropicError('invalid_request_error', 400));
      expect(JSON.stringify(r.body)).toContain('max_tokens');
      const wrong = `${s.apiKey.slice(0, -4)}AAAA`;
      const w = await messages(
        { model: 'anvil-tiny', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] },
        { authorization: '', 'x-api-key': wrong },
      );
      expect(w).toMatchObject(anthropicError('authentication_error', 401));
      expect(JSON.stringify(w.body)).not.toContain(wrong);
    });
  });

  it('bodies of 64 MiB, deeply nested JSON and invalid UTF-8', async () => {
    await refusedCleanly(async () => {
      const huge = Buffer.alloc(64 * MiB, 0x20);
      huge.write('{"model": "anvil-tiny", "input": "', 0);
      expect(await post('/v1/responses', huge)).toMatchObject(openAiError('request_too_large', 413));
      expect(await post('/v1/messages', huge)).toMatchObject(anthropicError('request_too_large', 413));

      const deep = `{"model": "anvil-tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "metadata": ${'['.repeat(100_000)}${']'.repeat(100_000)}}`;
      expect(await post('/v1/messages', deep)).toMatchObject(anthropicError('invalid_request_error', 400));
      expect(await post('/v1/responses', deep.replace('"messages"', '"input"'))).toMatchObject(openAiError('json_too_deep'));

      const bad = Buffer.concat([
        Buffer.from('{"model": "anvil-tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "'),
        Buffer.from([0xc3, 0x28]),
        Buffer.from('"}]}'),
      ]);
      expect(await post('/v1/messages', bad)).toMatchObject(anthropicError('invalid_request_error', 400));
      expect(await post('/v1/responses', bad)).toMatchObject(openAiError('invalid_utf8'));
    });
  });
});
