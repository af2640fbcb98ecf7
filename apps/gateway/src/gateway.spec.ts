import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createEvent, TOPICS } from '@anvil/contracts';
import { tinyChatFormat, type ChatMessage } from '@anvil/tokenizer';
import { recordsOf, startGatewayHarness, type GatewayHarness } from './testing/gateway-harness';
import type { ScriptedReply } from './testing/fake-inference-proxy';

/**
 * The gateway in-process (PGlite, in-process bus, scripted inference-proxy) driven by the
 * official OpenAI SDK, unchanged: capture, continuation and branching, streaming, tools, n,
 * stop strings, auth, errors, staleness back-pressure and record durability.
 */
const tiny = tinyChatFormat();
const tok = tiny.tokenizer;
const EOT = 258;
const ids = (text: string) => tok.encode(text);
const TOOL_TEXT = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>';
const tools: OpenAI.Chat.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'calculator',
      description: 'Evaluates arithmetic',
      parameters: { type: 'object', properties: { expression: { type: 'string' } }, required: ['expression'] },
    },
  },
];

/** The scripted model: what it "samples" depends on the last user turn of the prompt. */
function script(req: { promptIds: number[] }): ScriptedReply {
  const prompt = tok.decode(req.promptIds);
  const lastUser = prompt.slice(prompt.lastIndexOf('<|im_start|>user'));
  if (lastUser.includes('use the calculator')) return { ids: [...ids(TOOL_TEXT), EOT] };
  if (lastUser.includes('call the weather tool'))
    return { ids: [...ids('<tool_call>\n{"name": "weather", "arguments": {}}\n</tool_call>'), EOT] };
  if (lastUser.includes('say stop')) return { ids: [...ids('abc STOP def ghi'), EOT] };
  if (lastUser.includes('ramble')) return { ids: ids('x'.repeat(400)), finishReason: 'length' };
  if (lastUser.includes('backend down')) return { ids: [], error: { status: 503, message: 'no replica available' } };
  if (lastUser.includes('<tool_response>')) return { ids: [...ids('The answer is 5.'), EOT] };
  const turn = (prompt.match(/<\|im_start\|>assistant/g) ?? []).length;
  return { ids: [...ids(`reply ${turn}: ok`), EOT], version: 3 };
}

const callIdsOf = (res: Response) => (res.headers.get('x-anvil-call-ids') ?? '').split(',').filter(Boolean);
const sdk = (h: GatewayHarness, apiKey: string, baseURL = `${h.baseUrl}/v1`) => new OpenAI({ baseURL, apiKey, maxRetries: 0 });

describe('gateway (in-process, official OpenAI SDK)', () => {
  let h: GatewayHarness;
  beforeAll(async () => {
    h = await startGatewayHarness({ script });
  });
  afterAll(async () => {
    await h?.close();
  });

  it('records every turn token-exactly: turn k+1 is prompted with turn k prompt + output + only the new messages', async () => {
    const s = await h.createSession({ rolloutId: 'r-multi' });
    const client = sdk(h, s.apiKey);
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'hello' },
    ];
    const callIds: string[] = [];
    for (let turn = 0; turn < 4; turn++) {
      const { data, response } = await client.chat.completions
        .create({ model: 'anvil-tiny', messages, max_tokens: 64, logprobs: true })
        .withResponse();
      callIds.push(...callIdsOf(response));
      expect(data.choices[0].message.content).toBe(`reply ${turn + 1}: ok`);
      expect(data.choices[0].logprobs?.content?.length).toBe(`reply ${turn + 1}: ok`.length);
      expect(response.headers.get('x-anvil-capture')).toBe(turn === 0 ? 'branch:first-call' : `extend:${callIds[turn - 1]}`);
      messages.push(data.choices[0].message, { role: 'user', content: `next ${turn}` });
    }
    const records = await recordsOf(h, callIds);
    const sent = h.requestsFor(records[0].payload.sessionId);
    expect(sent).toHaveLength(4);
    for (let k = 0; k < 4; k++) {
      const p = records[k].payload;
      // What the engine saw and sampled is exactly what was recorded.
      expect(Array.from(p.promptIds)).toEqual(sent[k].promptIds);
      expect(Array.from(p.outputIds)).toEqual([...ids(`reply ${k + 1}: ok`), EOT]);
      expect(Array.from(p.outputVersions)).toEqual(new Array(p.outputIds.length).fill(3));
      expect(p.outputLogprobs.length).toBe(p.outputIds.length);
      expect(p.turnIndex).toBe(k);
      expect(p.branchId).toBe(records[0].payload.branchId);
      expect(p).toMatchObject({ rolloutId: 'r-multi', groupId: 'group-1', taskId: 'task-1', model: 'anvil-tiny', finishReason: 'stop' });
      if (k > 0) {
        const prev = records[k - 1].payload;
        expect(p.parentCallId).toBe(prev.callId);
        expect(Array.from(p.promptIds.slice(0, prev.promptIds.length + prev.outputIds.length))).toEqual([
          ...prev.promptIds,
          ...prev.outputIds,
        ]);
        expect(p.reusedPromptTokens).toBe(prev.promptIds.length + prev.outputIds.length);
      } else expect(p.parentCallId).toBeNull();
    }
    // The tiny template never rewrites history, so the continuation equals a full re-render.
    const last = records[3].payload;
    const rendered = tiny.template.render(messages.slice(0, -2) as ChatMessage[], { addGenerationPrompt: true });
    expect(Array.from(last.promptIds)).toEqual(ids(rendered));
    const state = await (await h.admin(`/admin/v1/sessions/${s.sessionId}`)).json();
    expect(state).toMatchObject({ sessionId: s.sessionId, status: 'open', callCount: 4, branchCount: 1, policyVersionAtStart: 0 });
  });

  it('runs a tool loop: tool_calls come back parsed, and the tool result turn extends the call token-exactly', async () => {
    const s = await h.createSession();
    const client = sdk(h, s.apiKey);
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'please use the calculator for 2+3' }];
    const first = await client.chat.completions.create({ model: 'anvil-tiny', messages, tools, max_tokens: 128 }).withResponse();
    const choice = first.data.choices[0];
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.tool_calls).toHaveLength(1);
    const call = choice.message.tool_calls![0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('calculator');
    expect(JSON.parse(call.function.arguments)).toEqual({ expression: '2+3' });
    // The agent echoes the call (re-serialised, as many agents do) and adds the tool result.
    messages.push({
      role: 'assistant',
      content: null,
      tool_calls: [{ ...call, function: { name: 'calculator', arguments: JSON.stringify(JSON.parse(call.function.arguments)) } }],
    });
    messages.push({ role: 'tool', tool_call_id: call.id, content: '5' });
    const second = await client.chat.completions.create({ model: 'anvil-tiny', messages, tools, max_tokens: 128 }).withResponse();
    expect(second.data.choices[0].message.content).toBe('The answer is 5.');
    const [a] = callIdsOf(first.response);
    expect(second.response.headers.get('x-anvil-capture')).toBe(`extend:${a}`);
    const [r1, r2] = await recordsOf(h, [a, ...callIdsOf(second.response)]);
    expect(r1.payload.finishReason).toBe('tool_calls');
    expect(Array.from(r1.payload.outputIds)).toEqual([...ids(TOOL_TEXT), EOT]);
    expect(Array.from(r2.payload.promptIds.slice(0, r1.payload.promptIds.length + r1.payload.outputIds.length))).toEqual([
      ...r1.payload.promptIds,
      ...r1.payload.outputIds,
    ]);
    expect(tok.decode(r2.payload.promptIds.slice(r2.payload.reusedPromptTokens))).toBe(
      '\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('starts a new branch (no parent, nothing reused) when the history is rewritten', async () => {
    const s = await h.createSession();
    const client = sdk(h, s.apiKey);
    const base: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'first question' }];
    const t1 = await client.chat.completions.create({ model: 'anvil-tiny', messages: base, max_tokens: 64 }).withResponse();
    const t2 = await client.chat.completions
      .create({ model: 'anvil-tiny', messages: [...base, t1.data.choices[0].message, { role: 'user', content: 'second' }], max_tokens: 64 })
      .withResponse();
    // Context management: the agent summarises the first exchange away.
    const t3 = await client.chat.completions
      .create({
        model: 'anvil-tiny',
        messages: [
          { role: 'user', content: 'summary: asked twice' },
          { role: 'assistant', content: t2.data.choices[0].message.content },
          { role: 'user', content: 'third' },
        ],
        max_tokens: 64,
      })
      .withResponse();
    expect(t3.response.headers.get('x-anvil-capture')).toBe('branch:no-matching-call');
    // An edited earlier message (same length) is caught by planContinuation too.
    const edited = await client.chat.completions
      .create({
        model: 'anvil-tiny',
        messages: [...base, { role: 'assistant', content: 'something else' }, { role: 'user', content: 'second' }],
        max_tokens: 64,
      })
      .withResponse();
    expect(edited.response.headers.get('x-anvil-capture')).toMatch(/^branch:/);
    const [r1, r2, r3, r4] = await recordsOf(h, [
      ...callIdsOf(t1.response),
      ...callIdsOf(t2.response),
      ...callIdsOf(t3.response),
      ...callIdsOf(edited.response),
    ]);
    expect(r2.payload.parentCallId).toBe(r1.payload.callId);
    for (const r of [r3, r4]) {
      expect(r.payload.parentCallId).toBeNull();
      expect(r.payload.reusedPromptTokens).toBe(0);
      expect(r.payload.branchId).not.toBe(r1.payload.branchId);
    }
    expect(r3.payload.branchId).not.toBe(r4.payload.branchId);
    // The new branch's prompt is a fresh rendering of what the agent sent, not a spliced sequence.
    expect(tok.decode(r3.payload.promptIds)).toBe(
      tiny.template.render(
        [
          { role: 'user', content: 'summary: asked twice' },
          { role: 'assistant', content: 'reply 2: ok' },
          { role: 'user', content: 'third' },
        ],
        { addGenerationPrompt: true },
      ),
    );
    // And the rewritten branch continues token-exactly from there.
    const t4 = await client.chat.completions
      .create({
        model: 'anvil-tiny',
        messages: [
          { role: 'user', content: 'summary: asked twice' },
          { role: 'assistant', content: t2.data.choices[0].message.content },
          { role: 'user', content: 'third' },
          t3.data.choices[0].message,
          { role: 'user', content: 'fourth' },
        ],
        max_tokens: 64,
      })
      .withResponse();
    expect(t4.response.headers.get('x-anvil-capture')).toBe(`extend:${r3.payload.callId}`);
    const state = await (await h.admin(`/admin/v1/sessions/${s.sessionId}`)).json();
    expect(state).toMatchObject({ callCount: 5, branchCount: 3 });
  });

  it('streams (SSE) the same reply the JSON answer gives, with usage, and records it before [DONE]', async () => {
    const s = await h.createSession();
    const client = sdk(h, s.apiKey);
    const { data: stream, response } = await client.chat.completions
      .create({
        model: 'anvil-tiny',
        messages: [{ role: 'user', content: 'stream please' }],
        max_tokens: 64,
        stream: true,
        stream_options: { include_usage: true },
        logprobs: true,
      })
      .withResponse();
    let text = '';
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += c.delta.content ?? '';
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    expect(text).toBe('reply 1: ok');
    expect(finish).toBe('stop');
    expect(chunks).toBeGreaterThan(3);
    const [rec] = await recordsOf(h, callIdsOf(response));
    expect(usage).toMatchObject({ completion_tokens: rec.payload.outputIds.length, prompt_tokens: rec.payload.promptIds.length });
    // Streaming tool calls: the SDK's stream helper assembles them.
    const runner = client.chat.completions.stream({
      model: 'anvil-tiny',
      messages: [{ role: 'user', content: 'use the calculator' }],
      tools,
      max_tokens: 128,
    });
    const final = await runner.finalChatCompletion();
    expect(final.choices[0].finish_reason).toBe('tool_calls');
    expect((final.choices[0].message.tool_calls?.[0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall).function.name).toBe(
      'calculator',
    );
  });

  it('answers n > 1 with n choices, each its own record sharing prompt, branch and parent', async () => {
    const s = await h.createSession();
    const client = sdk(h, s.apiKey);
    const { data, response } = await client.chat.completions
      .create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'three ways' }], max_tokens: 64, n: 3, seed: 7 })
      .withResponse();
    expect(data.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    const records = await recordsOf(h, callIdsOf(response));
    expect(new Set(records.map((r) => r.payload.callId)).size).toBe(3);
    expect(new Set(records.map((r) => r.payload.branchId)).size).toBe(1);
    expect(records.map((r) => r.payload.turnIndex).sort()).toEqual([0, 1, 2]);
    expect(records.map((r) => r.payload.sampling.seed)).toEqual([7, 8, 9]);
    for (const r of records) expect(Array.from(r.payload.promptIds)).toEqual(Array.from(records[0].payload.promptIds));
    // Continuing from choice 1 extends that choice.
    const next = await client.chat.completions
      .create({
        model: 'anvil-tiny',
        messages: [{ role: 'user', content: 'three ways' }, data.choices[1].message, { role: 'user', content: 'go on' }],
        max_tokens: 64,
      })
      .withResponse();
    expect(next.response.headers.get('x-anvil-capture')).toMatch(/^extend:/);
  });

  it('ends at a stop string, leaves it out of the reply and the record, and still extends token-exactly', async () => {
    const s = await h.createSession();
    const client = sdk(h, s.apiKey);
    for (const stream of [false, true]) {
      const req = {
        model: 'anvil-tiny',
        messages: [{ role: 'user' as const, content: `say stop ${stream}` }],
        max_tokens: 64,
        stop: ['STOP', 'zzz'],
      };
      let content: string;
      let callIds: string[];
      if (stream) {
        const { data, response } = await client.chat.completions.create({ ...req, stream: true }).withResponse();
        content = '';
        for await (const c of data) content += c.choices[0]?.delta.content ?? '';
        callIds = callIdsOf(response);
      } else {
        const { data, response } = await client.chat.completions.create(req).withResponse();
        content = data.choices[0].message.content ?? '';
        expect(data.choices[0].finish_reason).toBe('stop');
        callIds = callIdsOf(response);
      }
      expect(content).toBe('abc ');
      const [rec] = await recordsOf(h, callIds);
      expect(Array.from(rec.payload.outputIds)).toEqual(ids('abc '));
      const next = await client.chat.completions
        .create({ ...req, messages: [...req.messages, { role: 'assistant', content }, { role: 'user', content: 'more' }] })
        .withResponse();
      expect(next.response.headers.get('x-anvil-capture')).toBe(`extend:${callIds[0]}`);
    }
  });

  it('returns a call to a tool that was not offered as plain content (finish_reason stop), and says so in a header', async () => {
    const s = await h.createSession();
    const client = sdk(h, s.apiKey);
    const { data, response } = await client.chat.completions
      .create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'call the weather tool' }], tools, max_tokens: 128 })
      .withResponse();
    expect(data.choices[0].finish_reason).toBe('stop');
    expect(data.choices[0].message.tool_calls ?? []).toHaveLength(0);
    expect(data.choices[0].message.content).toContain('"name": "weather"');
    expect(response.headers.get('x-anvil-tool-call-issue')).toContain('weather');
    const [rec] = await recordsOf(h, callIdsOf(response));
    expect(rec.payload.finishReason).toBe('stop');
  });

  it('clamps max_tokens to the context and answers finish_reason length', async () => {
    const s = await h.createSession({ maxContextTokens: 100 });
    const client = sdk(h, s.apiKey);
    const { data, response } = await client.chat.completions
      .create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'ramble' }], max_completion_tokens: 5000 })
      .withResponse();
    expect(data.choices[0].finish_reason).toBe('length');
    const [rec] = await recordsOf(h, callIdsOf(response));
    expect(rec.payload.promptIds.length + rec.payload.outputIds.length).toBe(100);
    await expect(
      client.chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'y'.repeat(200) }] }),
    ).rejects.toMatchObject({
      status: 400,
      code: 'context_length_exceeded',
    });
  });

  it('serves /v1/models and /v1/completions', async () => {
    const s = await h.createSession();
    const client = sdk(h, s.apiKey);
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['anvil-tiny']);
    const { data, response } = await client.completions.create({ model: 'anvil-tiny', prompt: 'Once upon', max_tokens: 10 }).withResponse();
    expect(data.object).toBe('text_completion');
    const [rec] = await recordsOf(h, callIdsOf(response));
    expect(Array.from(rec.payload.promptIds)).toEqual(ids('Once upon'));
    expect(rec.payload.parentCallId).toBeNull();
  });

  describe('auth', () => {
    it('accepts the key as Bearer or as the per-session base URL, and nothing else', async () => {
      const a = await h.createSession();
      const b = await h.createSession();
      const req = { model: 'anvil-tiny', messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 16 };
      // The per-session URL works with any (or no) Authorization header: the path carries the secret.
      await expect(sdk(h, 'ignored', a.baseUrl).chat.completions.create(req)).resolves.toBeTruthy();
      expect(a.baseUrl).toContain(a.apiKey);
      // A URL without the secret, or with another session's secret, opens nothing.
      const bSecret = b.apiKey.split('.').pop();
      await expect(sdk(h, a.apiKey, `${h.baseUrl}/sessions/${a.sessionId}/v1`).chat.completions.create(req)).rejects.toMatchObject({
        status: 404,
      });
      await expect(
        sdk(h, a.apiKey, `${h.baseUrl}/sessions/anvil-${a.sessionId}.${bSecret}/v1`).chat.completions.create(req),
      ).rejects.toMatchObject({ status: 401 });
      await expect(sdk(h, `anvil-${a.sessionId}.${bSecret}`).chat.completions.create(req)).rejects.toMatchObject({ status: 401 });
      await expect(sdk(h, 'sk-not-a-key').chat.completions.create(req)).rejects.toMatchObject({ status: 401 });
      const res = await fetch(`${h.baseUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(req),
      });
      expect(res.status).toBe(401);
      expect(await res.json()).toMatchObject({ error: { type: 'invalid_request_error', code: 'invalid_api_key' } });
      // Agent keys never open the admin API; the admin token never opens a session.
      expect(
        (await fetch(`${h.baseUrl}/admin/v1/sessions/${a.sessionId}`, { headers: { authorization: `Bearer ${a.apiKey}` } })).status,
      ).toBe(401);
      await expect(sdk(h, 'harness-admin-token-0123456789abcdefghijklmnop').chat.completions.create(req)).rejects.toMatchObject({
        status: 401,
      });
    });

    it('refuses a closed session with 410 (both forms), and an unknown session with 401/404', async () => {
      const s = await h.createSession();
      const client = sdk(h, s.apiKey);
      const req = { model: 'anvil-tiny', messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 16 };
      await client.chat.completions.create(req);
      const closed = await (await h.admin(`/admin/v1/sessions/${s.sessionId}/close`, { method: 'POST' })).json();
      expect(closed).toMatchObject({ status: 'closed', closeReason: 'closed', callCount: 1 });
      await expect(client.chat.completions.create(req)).rejects.toMatchObject({ status: 410, code: 'session_closed' });
      await expect(sdk(h, 'x', s.baseUrl).chat.completions.create(req)).rejects.toMatchObject({ status: 410 });
      expect((await h.admin('/admin/v1/sessions/sess_doesnotexist0000000/close', { method: 'POST' })).status).toBe(404);
      await expect(
        sdk(h, 'x', `${h.baseUrl}/sessions/anvil-sess_AAAAAAAAAAAAAAAAAAAAAA.${'a'.repeat(43)}/v1`).chat.completions.create(req),
      ).rejects.toMatchObject({ status: 404 });
      const expired = await h.createSession({ expiresAt: Date.now() + 300 });
      await new Promise((r) => setTimeout(r, 400));
      await expect(sdk(h, expired.apiKey).chat.completions.create(req)).rejects.toMatchObject({ status: 410, code: 'session_expired' });
    });

    it('checks the admin credential and the session request', async () => {
      expect(
        (
          await fetch(`${h.baseUrl}/admin/v1/sessions`, {
            method: 'POST',
            headers: { authorization: 'Bearer wrong', 'content-type': 'application/json' },
            body: '{}',
          })
        ).status,
      ).toBe(401);
      expect((await h.admin('/admin/v1/sessions', { method: 'POST', body: JSON.stringify({ rolloutId: 'r' }) })).status).toBe(400);
      const unknownModel = await h.admin('/admin/v1/sessions', {
        method: 'POST',
        body: JSON.stringify({ rolloutId: 'r', groupId: 'g', taskId: 't', model: 'gpt-9' }),
      });
      expect(unknownModel.status).toBe(404);
    });
  });

  describe('bad input gets OpenAI-style errors and the process keeps serving', () => {
    const post = async (key: string, body: string | Buffer, headers: Record<string, string> = {}) => {
      const res = await fetch(`${h.baseUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
        body,
      });
      return {
        status: res.status,
        body: (await res.json()) as { error: { message: string; type: string; param: string | null; code: string | null } },
      };
    };
    it.each([
      ['malformed JSON', '{"model": "anvil-tiny", "messages": [', 400, 'invalid_json'],
      ['not an object', '[1,2,3]', 400, 'invalid_value'],
      ['wrong types', JSON.stringify({ model: 'anvil-tiny', messages: 'hi' }), 400, 'invalid_value'],
      ['bad role', JSON.stringify({ model: 'anvil-tiny', messages: [{ role: 'wizard', content: 'x' }] }), 400, 'invalid_value'],
      [
        'temperature out of range',
        JSON.stringify({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'x' }], temperature: 9 }),
        400,
        'invalid_value',
      ],
      ['unknown model', JSON.stringify({ model: 'gpt-9', messages: [{ role: 'user', content: 'x' }] }), 404, 'model_not_found'],
      ['n too large', JSON.stringify({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'x' }], n: 1000 }), 400, 'invalid_value'],
      [
        'unknown tool in tool_choice',
        JSON.stringify({
          model: 'anvil-tiny',
          messages: [{ role: 'user', content: 'x' }],
          tools,
          tool_choice: { type: 'function', function: { name: 'nope' } },
        }),
        400,
        'invalid_value',
      ],
      [
        'image content',
        JSON.stringify({ model: 'anvil-tiny', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }),
        400,
        'invalid_value',
      ],
    ])('%s', async (_name, body, status, code) => {
      const s = await h.createSession();
      const r = await post(s.apiKey, body as string);
      expect(r.status).toBe(status);
      expect(r.body.error).toMatchObject({ code });
      expect(typeof r.body.error.message).toBe('string');
    });

    it('invalid UTF-8 → 400, oversized body → 413, backend down → 503, unknown route → 404', async () => {
      const s = await h.createSession();
      const bad = Buffer.concat([
        Buffer.from('{"model":"anvil-tiny","messages":[{"role":"user","content":"'),
        Buffer.from([0xff, 0xfe, 0xc3]),
        Buffer.from('"}]}'),
      ]);
      expect(await post(s.apiKey, bad)).toMatchObject({ status: 400, body: { error: { code: 'invalid_utf8' } } });
      const huge = JSON.stringify({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'x'.repeat(h.config.MAX_REQUEST_BYTES) }] });
      const big = await post(s.apiKey, huge);
      expect(big.status).toBe(413);
      expect(big.body.error.type).toBe('invalid_request_error');
      await expect(
        sdk(h, s.apiKey).chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'backend down' }] }),
      ).rejects.toMatchObject({ status: 503 });
      const nf = await fetch(`${h.baseUrl}/v1/nope`, { headers: { authorization: `Bearer ${s.apiKey}` } });
      expect(nf.status).toBe(404);
      expect(await nf.json()).toMatchObject({ error: { code: 'not_found' } });
      await expect(
        sdk(h, s.apiKey).chat.completions.create({
          model: 'anvil-tiny',
          messages: [{ role: 'user', content: 'still fine' }],
          max_tokens: 8,
        }),
      ).resolves.toBeTruthy();
    });

    it('keeps answering through a broker outage: the records wait in the outbox and are published once it is back, each once', async () => {
      const s = await h.createSession();
      const client = sdk(h, s.apiKey);
      const before = h.records.length;
      h.flaky.failPublish = true;
      try {
        const a = await client.chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 });
        const b = await client.chat.completions.create({
          model: 'anvil-tiny',
          messages: [
            { role: 'user', content: 'hi' },
            { role: 'assistant', content: a.choices[0].message.content },
            { role: 'user', content: 'again' },
          ],
          max_tokens: 8,
        });
        expect(b.choices[0].message.content).toBeTruthy();
        const [{ n }] = (await h.ds.query(`SELECT count(*)::int AS "n" FROM "gateway_outbox" WHERE "session_id" = $1`, [s.sessionId])) as {
          n: number;
        }[];
        expect(n).toBe(2);
        expect(h.records.length).toBe(before);
      } finally {
        h.flaky.failPublish = false;
      }
      const deadline = Date.now() + 10_000;
      while (h.records.filter((r) => r.payload.sessionId === s.sessionId).length < 2 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 200));
      const mine = h.records.filter((r) => r.payload.sessionId === s.sessionId);
      expect(mine.map((r) => r.payload.turnIndex)).toEqual([0, 1]);
      expect(mine[1].payload.parentCallId).toBe(mine[0].payload.callId);
      const [{ n }] = (await h.ds.query(`SELECT count(*)::int AS "n" FROM "gateway_outbox" WHERE "session_id" = $1`, [s.sessionId])) as {
        n: number;
      }[];
      expect(n).toBe(0);
    });

    it('answers an error, not the reply, when the record cannot be made durable (the database refuses it)', async () => {
      const s = await h.createSession();
      const client = sdk(h, s.apiKey);
      const before = h.records.length;
      await h.ds.query(`ALTER TABLE "gateway_outbox" RENAME TO "gateway_outbox_away"`);
      try {
        await expect(
          client.chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }),
        ).rejects.toMatchObject({
          status: 503,
          code: 'record_unavailable',
        });
        const stream = await client.chat.completions.create({
          model: 'anvil-tiny',
          messages: [{ role: 'user', content: 'hi' }],
          max_tokens: 8,
          stream: true,
        });
        await expect(
          (async () => {
            for await (const _ of stream) void _;
          })(),
        ).rejects.toThrow(/recorded durably|could not be recorded/);
      } finally {
        await h.ds.query(`ALTER TABLE "gateway_outbox_away" RENAME TO "gateway_outbox"`);
      }
      await new Promise((r) => setTimeout(r, 100));
      expect(h.records.length).toBe(before);
      // Nothing of the refused calls was kept: the session's next call is its first turn.
      const ok = await client.chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 });
      expect(ok.choices[0].message.content).toBeTruthy();
      const deadline = Date.now() + 5_000;
      while (!h.records.some((r) => r.payload.sessionId === s.sessionId) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 20));
      expect(h.records.filter((r) => r.payload.sessionId === s.sessionId).map((r) => r.payload.turnIndex)).toEqual([0]);
    });
  });
});

describe('staleness back-pressure (MAX_STALENESS = 1)', () => {
  let h: GatewayHarness;
  beforeAll(async () => {
    h = await startGatewayHarness({ script, env: { MAX_STALENESS: '1', GATEWAY_RETRY_AFTER_S: '3' } });
  });
  afterAll(async () => {
    await h?.close();
  });

  const activate = async (version: number) => {
    await h.bus.publish(
      createEvent(
        'policy_version.activated',
        { version, deployment: 'default', swapPolicy: 'drain-then-swap', activatedAt: Date.now() },
        { key: String(version), producer: 'test' },
      ),
    );
    for (let i = 0; i < 200; i++) {
      const rows: { v: number }[] = await h.ds.query('SELECT max(version) AS v FROM gateway_policy_state');
      if (Number(rows[0]?.v) === version) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`version ${version} not seen`);
  };

  it('refuses new sessions with 429 + Retry-After while an in-flight session is too stale, never an admitted one', async () => {
    void TOPICS;
    const req = { model: 'anvil-tiny', messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 8 };
    const old = await h.createSession();
    await sdk(h, old.apiKey).chat.completions.create(req); // admitted at version 0
    await activate(1);
    const ok = await h.createSession();
    await sdk(h, ok.apiKey).chat.completions.create(req); // 1 − 0 ≤ 1: admitted at version 1
    await activate(2);
    const late = await h.createSession();
    const res = await fetch(`${late.baseUrl}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(req),
    });
    expect(res.status).toBe(429);
    expect(res.headers.get('retry-after')).toBe('3');
    expect(await res.json()).toMatchObject({ error: { type: 'rate_limit_error', code: 'staleness_capacity' } });
    // Calls of already admitted sessions go on.
    await expect(sdk(h, old.apiKey).chat.completions.create(req)).resolves.toBeTruthy();
    // The stale session ends: capacity frees up.
    await h.admin(`/admin/v1/sessions/${old.sessionId}/close`, { method: 'POST' });
    await expect(sdk(h, late.apiKey).chat.completions.create(req)).resolves.toBeTruthy();
    expect(await (await h.admin(`/admin/v1/sessions/${late.sessionId}`)).json()).toMatchObject({ policyVersionAtStart: 2 });
  });
});

describe('capture off (GATEWAY_CAPTURE=off)', () => {
  let h: GatewayHarness;
  beforeAll(async () => {
    h = await startGatewayHarness({ script, env: { GATEWAY_CAPTURE: 'off' } });
  });
  afterAll(async () => {
    await h?.close();
  });

  it('answers without publishing llm_call.recorded or saving capture state (the next turn starts a branch)', async () => {
    const s = await h.createSession({ rolloutId: 'r-capture-off' });
    const client = sdk(h, s.apiKey);
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'hello' }];
    const a = await client.chat.completions.create({ model: 'anvil-tiny', messages, max_tokens: 16 }).withResponse();
    expect(a.data.choices[0].message.content).toBe('reply 1: ok');
    messages.push(a.data.choices[0].message, { role: 'user', content: 'next' });
    const b = await client.chat.completions.create({ model: 'anvil-tiny', messages, max_tokens: 16 }).withResponse();
    expect(b.data.choices[0].message.content).toBe('reply 2: ok');
    expect(b.response.headers.get('x-anvil-capture')).toMatch(/^branch:/);
    await new Promise((r) => setTimeout(r, 200));
    expect(h.records).toHaveLength(0);
    const rows: { n: number }[] = await h.ds.query(`SELECT count(*)::int AS n FROM gateway_calls`);
    expect(Number(rows[0].n)).toBe(0);
    // Nothing recorded, so no turn was reserved either (capture off writes nothing per call).
    expect(await (await h.admin(`/admin/v1/sessions/${s.sessionId}`)).json()).toMatchObject({ callCount: 0, status: 'open' });
  });
});
