import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Anthropic from '@anthropic-ai/sdk';
import { tinyChatFormat, type ChatMessage } from '@anvil/tokenizer';
import { assertExtends, recordsOf, startGatewayHarness, type GatewayHarness } from '../testing/gateway-harness';
import type { ScriptedReply } from '../testing/fake-inference-proxy';

/**
 * The Anthropic Messages API in-process (PGlite, in-process bus, scripted inference-proxy)
 * through the official @anthropic-ai/sdk, unchanged: answers, streams, tools and tool_result
 * turns, stop reasons, count_tokens, the model list in Anthropic's shape, both key headers, and
 * the capture underneath: a client re-sending its history extends the previous call
 * token-exactly; a compacted history (what Claude Code does when its context fills) branches.
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
  if (lastUser.includes('add')) return { ids: [...ids(`Adding.\n${call('add', '{"a": 1, "b": 2}')}`), EOT] };
  if (lastUser.includes('say stop')) return { ids: [...ids('abc STOP def'), EOT] };
  if (lastUser.includes('ramble')) return { ids: ids('y'.repeat(300)), finishReason: 'length' };
  if (lastUser.includes('think')) return { ids: [...ids('<think>\nhmm\n</think>\n\nthought'), EOT] };
  const turn = (prompt.match(/<\|im_start\|>assistant/g) ?? []).length;
  return { ids: [...ids(`reply ${turn}`), EOT], version: 5 };
}

const addTool: Anthropic.Tool = {
  name: 'add',
  description: 'a + b',
  input_schema: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
};

const headerOf = (r: { headers: Headers }) => ({
  callId: r.headers.get('x-anvil-call-ids') ?? '',
  capture: r.headers.get('x-anvil-capture') ?? '',
});

describe('POST /v1/messages (official @anthropic-ai/sdk)', () => {
  let h: GatewayHarness;
  let client: Anthropic;
  let session: { sessionId: string; apiKey: string; baseUrl: string };
  const fresh = async () => {
    session = await h.createSession();
    client = new Anthropic({ baseURL: h.baseUrl, apiKey: session.apiKey, maxRetries: 0 });
    return client;
  };
  beforeAll(async () => {
    h = await startGatewayHarness({ script });
  });
  afterAll(async () => {
    await h?.close();
  });

  it('answers a conversation and extends it token-exactly turn after turn (the client re-sends its history)', async () => {
    await fresh();
    const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'hello' }];
    const callIds: string[] = [];
    for (let turn = 0; turn < 3; turn++) {
      const { data, response } = await client.messages
        .create({ model: 'anvil-tiny', max_tokens: 64, system: [{ type: 'text', text: 'Be terse.' }], messages })
        .withResponse();
      expect(data).toMatchObject({ type: 'message', role: 'assistant', model: 'anvil-tiny', stop_reason: 'end_turn', stop_sequence: null });
      expect(data.content).toEqual([{ type: 'text', text: `reply ${turn + 1}` }]);
      callIds.push(headerOf(response).callId);
      expect(headerOf(response).capture).toBe(turn === 0 ? 'branch:first-call' : `extend:${callIds[turn - 1]}`);
      messages.push({ role: 'assistant', content: data.content }, { role: 'user', content: [{ type: 'text', text: `next ${turn}` }] });
      if (turn > 0) expect(data.usage.cache_read_input_tokens).toBeGreaterThan(0);
    }
    const records = await recordsOf(h, callIds);
    for (let k = 1; k < 3; k++) assertExtends(records[k], records[k - 1]);
    expect(Array.from(records[0].payload.outputVersions)).toEqual(new Array(records[0].payload.outputIds.length).fill(5));
    const history: ChatMessage[] = [
      { role: 'system', content: 'Be terse.' },
      { role: 'user', content: 'hello' },
    ];
    for (let k = 0; k < 2; k++) history.push({ role: 'assistant', content: `reply ${k + 1}` }, { role: 'user', content: `next ${k}` });
    expect(tok.decode(records[2].payload.promptIds)).toBe(tiny.template.render(history, { addGenerationPrompt: true }));
  });

  it('runs a tool loop: tool_use blocks with ids, a tool_result turn (is_error too) that extends the call', async () => {
    await fresh();
    const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'please add 1 and 2' }];
    const first = await client.messages.create({ model: 'anvil-tiny', max_tokens: 128, tools: [addTool], messages }).withResponse();
    expect(first.data.stop_reason).toBe('tool_use');
    expect(first.data.content).toEqual([
      { type: 'text', text: 'Adding.' },
      { type: 'tool_use', id: expect.stringMatching(/^call_/), name: 'add', input: { a: 1, b: 2 } },
    ]);
    const use = first.data.content[1] as Anthropic.ToolUseBlock;
    messages.push(
      { role: 'assistant', content: first.data.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: '3' }], is_error: false }] },
    );
    const second = await client.messages.create({ model: 'anvil-tiny', max_tokens: 128, tools: [addTool], messages }).withResponse();
    expect(second.data.content).toEqual([{ type: 'text', text: 'The sum is 3.' }]);
    expect(headerOf(second.response).capture).toBe(`extend:${headerOf(first.response).callId}`);
    const [a, b] = await recordsOf(h, [headerOf(first.response).callId, headerOf(second.response).callId]);
    expect(a.payload.finishReason).toBe('tool_calls');
    assertExtends(b, a);
    // The model read the result as the template renders a tool response.
    expect(tok.decode(b.payload.promptIds)).toContain('<tool_response>\n3\n</tool_response>');
  });

  it('streams Anthropic events; the SDK accumulates them into the message the JSON answer is', async () => {
    await fresh();
    const events: Anthropic.RawMessageStreamEvent[] = [];
    const stream = client.messages.stream({
      model: 'anvil-tiny',
      max_tokens: 128,
      tools: [addTool],
      messages: [{ role: 'user', content: 'please add 1 and 2' }],
    });
    stream.on('streamEvent', (e) => events.push(e));
    const final = await stream.finalMessage();
    const types = events.map((e) => e.type);
    expect(types[0]).toBe('message_start');
    expect(types.slice(-2)).toEqual(['message_delta', 'message_stop']);
    expect(types.filter((t) => t === 'content_block_start')).toHaveLength(2);
    expect(events.some((e) => e.type === 'content_block_delta' && e.delta.type === 'input_json_delta')).toBe(true);
    expect(
      events
        .filter((e) => e.type === 'content_block_delta' && e.delta.type === 'text_delta')
        .map((e) => (e as { delta: { text: string } }).delta.text)
        .join(''),
    ).toBe('Adding.');
    expect(final).toMatchObject({
      stop_reason: 'tool_use',
      content: [
        { type: 'text', text: 'Adding.' },
        { type: 'tool_use', name: 'add', input: { a: 1, b: 2 } },
      ],
    });
    expect(final.usage.output_tokens).toBeGreaterThan(0);

    const thinking = await client.messages
      .stream({ model: 'anvil-tiny', max_tokens: 64, messages: [{ role: 'user', content: 'think first' }] })
      .finalMessage();
    expect(thinking.content).toEqual([
      { type: 'thinking', thinking: 'hmm', signature: '' },
      { type: 'text', text: 'thought' },
    ]);
  });

  it('stop reasons: stop_sequence names the sequence, max_tokens at the limit', async () => {
    await fresh();
    const stopped = await client.messages.create({
      model: 'anvil-tiny',
      max_tokens: 64,
      stop_sequences: ['STOP'],
      messages: [{ role: 'user', content: 'say stop' }],
    });
    expect(stopped).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: 'STOP', content: [{ type: 'text', text: 'abc ' }] });
    const cut = await client.messages.create({ model: 'anvil-tiny', max_tokens: 16, messages: [{ role: 'user', content: 'ramble on' }] });
    expect(cut).toMatchObject({ stop_reason: 'max_tokens', usage: { output_tokens: 16 } });
  });

  it('tool_choice any and tool force a call; none parses none', async () => {
    await fresh();
    const any = await client.messages.create({
      model: 'anvil-tiny',
      max_tokens: 64,
      tools: [addTool],
      tool_choice: { type: 'any' },
      messages: [{ role: 'user', content: 'sum' }],
    });
    expect(any.content).toEqual([expect.objectContaining({ type: 'tool_use', name: 'add', input: { a: 3, b: 4 } })]);
    await fresh();
    const named = await client.messages.create({
      model: 'anvil-tiny',
      max_tokens: 64,
      tools: [addTool],
      tool_choice: { type: 'tool', name: 'add' },
      messages: [{ role: 'user', content: 'sum' }],
    });
    expect(named.content).toEqual([expect.objectContaining({ type: 'tool_use', name: 'add', input: { a: 1, b: 2 } })]);
    await fresh();
    const none = await client.messages.create({
      model: 'anvil-tiny',
      max_tokens: 64,
      tools: [addTool],
      tool_choice: { type: 'none' },
      messages: [{ role: 'user', content: 'please add' }],
    });
    expect(none.stop_reason).toBe('end_turn');
    expect(none.content).toEqual([{ type: 'text', text: expect.stringContaining('<tool_call>') }]);
  });

  it('a compacted history (earlier turns replaced by a summary, as Claude Code compacts) starts a new branch', async () => {
    await fresh();
    const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'hello' }];
    const first = await client.messages.create({ model: 'anvil-tiny', max_tokens: 64, messages }).withResponse();
    messages.push({ role: 'assistant', content: first.data.content }, { role: 'user', content: 'more' });
    const second = await client.messages.create({ model: 'anvil-tiny', max_tokens: 64, messages }).withResponse();
    expect(headerOf(second.response).capture).toBe(`extend:${headerOf(first.response).callId}`);
    const compacted = await client.messages
      .create({
        model: 'anvil-tiny',
        max_tokens: 64,
        messages: [{ role: 'user', content: 'Summary of the conversation so far: greetings.\n\ncontinue' }],
      })
      .withResponse();
    expect(headerOf(compacted.response).capture).toBe('branch:no-matching-call');
    const [a, c] = await recordsOf(h, [headerOf(first.response).callId, headerOf(compacted.response).callId]);
    expect(c.payload.parentCallId).toBeNull();
    expect(c.payload.branchId).not.toBe(a.payload.branchId);
  });

  it('count_tokens counts the prompt the call would render', async () => {
    await fresh();
    const params = { model: 'anvil-tiny', system: 'Be terse.', messages: [{ role: 'user' as const, content: 'hello' }], tools: [addTool] };
    const counted = await client.messages.countTokens(params);
    const { response } = await client.messages.create({ ...params, max_tokens: 32 }).withResponse();
    const [rec] = await recordsOf(h, [headerOf(response).callId]);
    expect(counted.input_tokens).toBe(rec.payload.promptIds.length);
  });

  it('takes the key in x-api-key or Authorization: Bearer, or as the per-session URL; lists the model in Anthropic shape', async () => {
    await fresh();
    const bearer = new Anthropic({ baseURL: h.baseUrl, authToken: session.apiKey, apiKey: null, maxRetries: 0 });
    expect(
      (await bearer.messages.create({ model: 'anvil-tiny', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] })).content,
    ).toHaveLength(1);
    const viaUrl = new Anthropic({ baseURL: `${h.baseUrl}/sessions/${session.apiKey}`, apiKey: 'placeholder', maxRetries: 0 });
    expect(
      (await viaUrl.messages.create({ model: 'anvil-tiny', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] })).content,
    ).toHaveLength(1);
    const models = await viaUrl.models.list();
    expect(models.data).toEqual([{ type: 'model', id: 'anvil-tiny', display_name: 'anvil-tiny', created_at: expect.any(String) }]);
    expect(await viaUrl.models.retrieve('anvil-tiny')).toMatchObject({ type: 'model', id: 'anvil-tiny' });
    const page = (await (await fetch(`${h.baseUrl}/v1/models`, { headers: { 'anthropic-version': '2023-06-01' } })).json()) as Record<
      string,
      unknown
    >;
    expect(page).toMatchObject({ has_more: false, first_id: 'anvil-tiny', last_id: 'anvil-tiny' });
    // An OpenAI client still gets OpenAI's list.
    expect(await (await fetch(`${h.baseUrl}/v1/models`)).json()).toMatchObject({ object: 'list' });
  });
});
