import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { tinyChatFormat, type ChatMessage } from '@anvil/tokenizer';
import { assertExtends, recordsOf, startGatewayHarness, type GatewayHarness } from '../testing/gateway-harness';
import type { ScriptedReply } from '../testing/fake-inference-proxy';

/**
 * The Responses API in-process (PGlite, in-process bus, scripted inference-proxy) through the
 * official openai SDK, unchanged: answers, streams (the documented event sequence), tools, stored
 * responses, and the capture underneath: a previous_response_id follow-up and a client re-sending
 * its whole history (store: false, as Codex does) both extend the previous call token-exactly; a
 * rewritten history branches.
 */
const tiny = tinyChatFormat();
const tok = tiny.tokenizer;
const EOT = 258;
const ids = (text: string) => tok.encode(text);
const call = (name: string, args: string) => `<tool_call>\n{"name": "${name}", "arguments": ${args}}\n</tool_call>`;

function script(req: { promptIds: number[] }): ScriptedReply {
  const prompt = tok.decode(req.promptIds);
  const lastUser = prompt.slice(prompt.lastIndexOf('<|im_start|>user'));
  if (prompt.endsWith('<tool_call>\n{"name": "add')) return { ids: [...ids('", "arguments": {"a": 1, "b": 2}}\n</tool_call>'), EOT] };
  if (prompt.endsWith('<tool_call>\n{"name": "')) return { ids: [...ids('add", "arguments": {"a": 3, "b": 4}}\n</tool_call>'), EOT] };
  if (lastUser.includes('<tool_response>')) return { ids: [...ids('The sum is 3.'), EOT] };
  if (lastUser.includes('add twice'))
    return { ids: [...ids(`${call('add', '{"a": 1, "b": 2}')}\n${call('add', '{"a": 3, "b": 4}')}`), EOT] };
  if (lastUser.includes('add')) return { ids: [...ids(`Adding.\n${call('add', '{"a": 1, "b": 2}')}`), EOT] };
  if (lastUser.includes('ramble')) return { ids: ids('y'.repeat(300)), finishReason: 'length' };
  const turn = (prompt.match(/<\|im_start\|>assistant/g) ?? []).length;
  return { ids: [...ids(`reply ${turn}`), EOT], version: 2 };
}

const addTool: OpenAI.Responses.FunctionTool = {
  type: 'function',
  name: 'add',
  description: 'a + b',
  parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
  strict: false,
};

const headerOf = (r: { headers: Headers }) => ({
  callId: r.headers.get('x-anvil-call-ids') ?? '',
  capture: r.headers.get('x-anvil-capture') ?? '',
});

describe('POST /v1/responses (official openai SDK)', () => {
  let h: GatewayHarness;
  let client: OpenAI;
  let session: { sessionId: string; apiKey: string; baseUrl: string };
  const fresh = async () => {
    session = await h.createSession();
    client = new OpenAI({ baseURL: `${h.baseUrl}/v1`, apiKey: session.apiKey, maxRetries: 0 });
    return client;
  };
  beforeAll(async () => {
    h = await startGatewayHarness({ script });
  });
  afterAll(async () => {
    await h?.close();
  });

  it('answers a string input with instructions, records it, and GET /v1/responses/{id} returns the stored response', async () => {
    await fresh();
    const { data, response } = await client.responses
      .create({ model: 'anvil-tiny', instructions: 'Be terse.', input: 'hello', metadata: { run: 'r1' } })
      .withResponse();
    expect(data).toMatchObject({ object: 'response', status: 'completed', model: 'anvil-tiny', metadata: { run: 'r1' }, store: true });
    expect(data.output_text).toBe('reply 1');
    expect(data.output).toEqual([
      expect.objectContaining({
        type: 'message',
        role: 'assistant',
        content: [expect.objectContaining({ type: 'output_text', text: 'reply 1' })],
      }),
    ]);
    const [rec] = await recordsOf(h, [headerOf(response).callId]);
    expect(headerOf(response).capture).toBe('branch:first-call');
    // The instructions are the system turn the template renders first.
    expect(tok.decode(rec.payload.promptIds)).toBe(
      tiny.template.render(
        [
          { role: 'system', content: 'Be terse.' },
          { role: 'user', content: 'hello' },
        ],
        { addGenerationPrompt: true },
      ),
    );
    expect(Array.from(rec.payload.outputVersions)).toEqual(new Array(rec.payload.outputIds.length).fill(2));
    expect(data.usage).toMatchObject({ input_tokens: rec.payload.promptIds.length, output_tokens: rec.payload.outputIds.length });
    expect(await client.responses.retrieve(data.id)).toEqual(JSON.parse(JSON.stringify(data)));
  });

  it('previous_response_id: each follow-up sends only its new input and extends the previous call token-exactly', async () => {
    await fresh();
    const callIds: string[] = [];
    let previous: string | undefined;
    for (let turn = 0; turn < 4; turn++) {
      const { data, response } = await client.responses
        .create({
          model: 'anvil-tiny',
          instructions: 'Be terse.',
          input: [{ role: 'user', content: `turn ${turn}` }],
          previous_response_id: previous,
        })
        .withResponse();
      expect(data.output_text).toBe(`reply ${turn + 1}`);
      expect(data.previous_response_id).toBe(previous ?? null);
      callIds.push(headerOf(response).callId);
      expect(headerOf(response).capture).toBe(turn === 0 ? 'branch:first-call' : `extend:${callIds[turn - 1]}`);
      previous = data.id;
    }
    const records = await recordsOf(h, callIds);
    for (let k = 1; k < 4; k++) assertExtends(records[k], records[k - 1]);
    // What the engine was sent is what was recorded, and equals a full re-render of the conversation.
    const sent = h.requestsFor(session.sessionId);
    expect(sent.map((r) => r.promptIds)).toEqual(records.map((r) => Array.from(r.payload.promptIds)));
    const history: ChatMessage[] = [{ role: 'system', content: 'Be terse.' }];
    for (let k = 0; k < 4; k++) history.push({ role: 'user', content: `turn ${k}` }, { role: 'assistant', content: `reply ${k + 1}` });
    expect(tok.decode(records[3].payload.promptIds)).toBe(tiny.template.render(history.slice(0, -1), { addGenerationPrompt: true }));
  });

  it('runs a tool loop: function_call items come back with call ids, and the output turn extends the call, by previous_response_id and by the whole history (store: false)', async () => {
    for (const mode of ['previous_response_id', 'whole history'] as const) {
      await fresh();
      const store = mode === 'previous_response_id';
      const first = await client.responses
        .create({ model: 'anvil-tiny', input: 'please add 1 and 2', tools: [addTool], store })
        .withResponse();
      const items = first.data.output;
      expect(items.map((i) => i.type)).toEqual(['message', 'function_call']);
      const fc = items[1] as OpenAI.Responses.ResponseFunctionToolCall;
      expect(fc).toMatchObject({ name: 'add', arguments: '{"a": 1, "b": 2}', status: 'completed' });
      expect(fc.call_id).toMatch(/^call_/);
      const output: OpenAI.Responses.ResponseInputItem = { type: 'function_call_output', call_id: fc.call_id, output: '3' };
      const second = await client.responses
        .create(
          store
            ? { model: 'anvil-tiny', input: [output], tools: [addTool], previous_response_id: first.data.id }
            : {
                model: 'anvil-tiny',
                input: ['please add 1 and 2', ...items, output].map((i) =>
                  typeof i === 'string' ? { role: 'user' as const, content: i } : i,
                ) as OpenAI.Responses.ResponseInput,
                tools: [addTool],
                store,
              },
        )
        .withResponse();
      expect(second.data.output_text, mode).toBe('The sum is 3.');
      expect(headerOf(second.response).capture, mode).toBe(`extend:${headerOf(first.response).callId}`);
      const [a, b] = await recordsOf(h, [headerOf(first.response).callId, headerOf(second.response).callId]);
      expect(a.payload.finishReason).toBe('tool_calls');
      assertExtends(b, a);
      // store: false keeps nothing to retrieve.
      if (!store) await expect(client.responses.retrieve(first.data.id)).rejects.toMatchObject({ status: 404 });
    }
  });

  it('streams the documented event sequence with increasing sequence numbers, ending in the response the JSON answer would be', async () => {
    await fresh();
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    const stream = await client.responses.create({ model: 'anvil-tiny', input: 'please add 1 and 2', tools: [addTool], stream: true });
    for await (const e of stream) events.push(e);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...events.filter((e) => e.type === 'response.output_text.delta').map(() => 'response.output_text.delta'),
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const deltas = events.flatMap((e) => (e.type === 'response.output_text.delta' ? [e.delta] : []));
    expect(deltas.join('')).toBe('Adding.');
    const done = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
    expect(done.response.output.map((o) => o.type)).toEqual(['message', 'function_call']);
    // (the SDK adds output_text to what it retrieves, as to every non-streamed response)
    const { output_text: text, ...stored } = await client.responses.retrieve(done.response.id);
    expect(text).toBe('Adding.');
    expect(stored).toEqual(JSON.parse(JSON.stringify(done.response)));

    // The SDK's own accumulator (responses.stream) checks the sequence and builds the same response.
    const follow = client.responses.stream({
      model: 'anvil-tiny',
      input: [
        {
          type: 'function_call_output',
          call_id: (done.response.output[1] as OpenAI.Responses.ResponseFunctionToolCall).call_id,
          output: '3',
        },
      ],
      tools: [addTool],
      previous_response_id: done.response.id,
    });
    const final = await follow.finalResponse();
    expect(final.output_text).toBe('The sum is 3.');
    expect(final.status).toBe('completed');
  });

  it('tool_choice "required" and a named function force a call; "none" keeps the tools in the prompt and parses none', async () => {
    await fresh();
    const required = await client.responses.create({ model: 'anvil-tiny', input: 'sum please', tools: [addTool], tool_choice: 'required' });
    expect(required.output).toEqual([expect.objectContaining({ type: 'function_call', name: 'add', arguments: '{"a": 3, "b": 4}' })]);
    await fresh();
    const named = await client.responses.create({
      model: 'anvil-tiny',
      input: 'sum please',
      tools: [addTool],
      tool_choice: { type: 'function', name: 'add' },
    });
    expect(named.output).toEqual([expect.objectContaining({ type: 'function_call', name: 'add', arguments: '{"a": 1, "b": 2}' })]);
    await fresh();
    const none = await client.responses.create({ model: 'anvil-tiny', input: 'please add 1 and 2', tools: [addTool], tool_choice: 'none' });
    expect(none.output.map((o) => o.type)).toEqual(['message']);
    expect(none.output_text).toContain('<tool_call>');
    const sent = h.requestsFor(session.sessionId)[0];
    expect(tok.decode(sent.promptIds)).toContain('"name": "add"');
  });

  it('parallel_tool_calls: false returns a reply with two calls as text (x-anvil-tool-call-issue), and the echo still extends', async () => {
    await fresh();
    const first = await client.responses
      .create({ model: 'anvil-tiny', input: 'add twice', tools: [addTool], parallel_tool_calls: false })
      .withResponse();
    expect(first.data.output.map((o) => o.type)).toEqual(['message']);
    expect(first.data.parallel_tool_calls).toBe(false);
    expect(first.response.headers.get('x-anvil-tool-call-issue')).toMatch(/2 tool calls where parallel tool calls are off/);
    const second = await client.responses
      .create({ model: 'anvil-tiny', input: 'go on', tools: [addTool], parallel_tool_calls: false, previous_response_id: first.data.id })
      .withResponse();
    expect(headerOf(second.response).capture).toBe(`extend:${headerOf(first.response).callId}`);
  });

  it('max_output_tokens: a reply cut at the limit is incomplete (max_output_tokens)', async () => {
    await fresh();
    const r = await client.responses.create({ model: 'anvil-tiny', input: 'ramble on', max_output_tokens: 20 });
    expect(r).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, max_output_tokens: 20 });
    expect(r.usage?.output_tokens).toBe(20);
  });

  it('a rewritten history (an earlier turn edited) starts a new branch', async () => {
    await fresh();
    const first = await client.responses.create({ model: 'anvil-tiny', input: 'first' }).withResponse();
    const edited = await client.responses
      .create({
        model: 'anvil-tiny',
        input: [
          { role: 'user', content: 'first, edited' },
          { role: 'assistant', content: first.data.output_text },
          { role: 'user', content: 'second' },
        ],
      })
      .withResponse();
    expect(headerOf(edited.response).capture).toBe('branch:no-matching-call');
    const [a, b] = await recordsOf(h, [headerOf(first.response).callId, headerOf(edited.response).callId]);
    expect(b.payload.parentCallId).toBeNull();
    expect(b.payload.branchId).not.toBe(a.payload.branchId);
  });

  it('works under the per-session base URL with a placeholder key', async () => {
    await fresh();
    const viaUrl = new OpenAI({ baseURL: session.baseUrl, apiKey: 'placeholder', maxRetries: 0 });
    const r = await viaUrl.responses.create({ model: 'anvil-tiny', input: 'hello' });
    expect(r.output_text).toBe('reply 1');
    expect(await viaUrl.responses.retrieve(r.id)).toMatchObject({ id: r.id });
  });
});

describe('POST /v1/responses with GATEWAY_CAPTURE=off', () => {
  let h: GatewayHarness;
  beforeAll(async () => {
    h = await startGatewayHarness({ script, env: { GATEWAY_CAPTURE: 'off' } });
  });
  afterAll(async () => {
    await h?.close();
  });

  it('still stores responses (nothing is recorded): previous_response_id and GET work, each call a branch', async () => {
    const s = await h.createSession();
    const client = new OpenAI({ baseURL: `${h.baseUrl}/v1`, apiKey: s.apiKey, maxRetries: 0 });
    const first = await client.responses.create({ model: 'anvil-tiny', input: 'hello' });
    const second = await client.responses.create({ model: 'anvil-tiny', input: 'again', previous_response_id: first.id }).withResponse();
    expect(second.data.output_text).toBe('reply 2');
    expect(headerOf(second.response).capture).toMatch(/^branch:/);
    // The follow-up's prompt is the whole conversation, rendered afresh.
    const sent = h.requestsFor(s.sessionId)[1];
    expect(tok.decode(sent.promptIds)).toBe(
      tiny.template.render(
        [
          { role: 'user', content: 'hello' },
          { role: 'assistant', content: 'reply 1' },
          { role: 'user', content: 'again' },
        ],
        { addGenerationPrompt: true },
      ),
    );
    expect(await client.responses.retrieve(second.data.id)).toMatchObject({ id: second.data.id, previous_response_id: first.id });
    expect(h.records).toHaveLength(0);
  });
});
