import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { tinyChatFormat } from '@anvil/tokenizer';
import { startGatewayHarness, type GatewayHarness } from '../testing/gateway-harness';

/**
 * tool_choice "required" and a named tool are enforced: the gateway appends the opening of a
 * Hermes tool call (through the name when one is named) to the prompt, so what the model
 * continues with is that call. Checked through the official SDK the way an SDK that verifies
 * the answer would (the answer must hold a call of the named tool), with the forced tokens in
 * the record's prompt, not its output, and the next turn still a token-exact extension.
 */
const tok = tinyChatFormat().tokenizer;
const EOT = 258;
const tools: OpenAI.Chat.ChatCompletionTool[] = [
  {
    type: 'function',
    function: { name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } } } },
  },
  {
    type: 'function',
    function: { name: 'mul', parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } } } },
  },
];
/** A "model" that answers in text unless the prompt already opened a tool call, which it then completes. */
const script = (req: { promptIds: number[] }) => {
  const prompt = tok.decode(req.promptIds);
  if (prompt.endsWith('<tool_call>\n{"name": "add'))
    return { ids: [...tok.encode('", "arguments": {"a": 12, "b": 7}}\n</tool_call>'), EOT] };
  if (prompt.endsWith('<tool_call>\n{"name": "'))
    return { ids: [...tok.encode('mul", "arguments": {"a": 3, "b": 4}}\n</tool_call>'), EOT] };
  return { ids: [...tok.encode('I would rather talk.'), EOT] };
};

describe('tool_choice is enforced', () => {
  let h: GatewayHarness;
  beforeAll(async () => {
    h = await startGatewayHarness({ script });
  });
  afterAll(() => h?.close());
  const client = async () => new OpenAI({ baseURL: `${h.baseUrl}/v1`, apiKey: (await h.createSession()).apiKey, maxRetries: 0 });

  it('a named tool: the answer calls it, the forced opening is prompt, and the next turn extends token-exactly', async () => {
    const sdk = await client();
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: '12+7' }];
    const { data, response } = await sdk.chat.completions
      .create({ model: 'anvil-tiny', messages, tools, tool_choice: { type: 'function', function: { name: 'add' } } })
      .withResponse();
    const choice = data.choices[0];
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.tool_calls).toHaveLength(1);
    const call = choice.message.tool_calls![0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('add');
    expect(JSON.parse(call.function.arguments)).toEqual({ a: 12, b: 7 });
    const callId = response.headers.get('x-anvil-call-ids')!;
    const record = await waitForRecord(h, callId);
    const prompt = tok.decode(record.promptIds);
    expect(prompt.endsWith('<|im_start|>assistant\n<tool_call>\n{"name": "add')).toBe(true);
    expect(tok.decode(record.outputIds)).toBe('", "arguments": {"a": 12, "b": 7}}\n</tool_call><|im_end|>');
    expect(data.usage?.completion_tokens).toBe(record.outputIds.length);

    const next = await sdk.chat.completions
      .create({
        model: 'anvil-tiny',
        messages: [...messages, choice.message, { role: 'tool', tool_call_id: call.id, content: '19' }],
        tools,
      })
      .withResponse();
    expect(next.response.headers.get('x-anvil-capture')).toBe(`extend:${callId}`);
    expect(next.data.choices[0].message.content).toBe('I would rather talk.'); // auto: nothing forced
  });

  it('"required": the answer is a call of one of the tools (JSON and stream alike)', async () => {
    const sdk = await client();
    const req = { model: 'anvil-tiny', messages: [{ role: 'user' as const, content: '3*4' }], tools, tool_choice: 'required' as const };
    const json = await sdk.chat.completions.create(req);
    expect(json.choices[0].finish_reason).toBe('tool_calls');
    const call = json.choices[0].message.tool_calls![0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('mul');
    expect(JSON.parse(call.function.arguments)).toEqual({ a: 3, b: 4 });
    const stream = await sdk.chat.completions.create({ ...req, stream: true });
    const deltas: OpenAI.Chat.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    let finish: string | null = null;
    let content = '';
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      deltas.push(...(c.delta.tool_calls ?? []));
      content += c.delta.content ?? '';
      finish = c.finish_reason ?? finish;
    }
    expect(finish).toBe('tool_calls');
    expect(content).toBe('');
    expect(deltas.map((d) => d.function?.name)).toEqual(['mul']);
  });

  it('"auto" and "none" force nothing', async () => {
    const sdk = await client();
    for (const tool_choice of ['auto', 'none'] as const) {
      const r = await sdk.chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }], tools, tool_choice });
      expect(r.choices[0].message.content).toBe('I would rather talk.');
      expect(r.choices[0].message.tool_calls ?? []).toEqual([]);
    }
  });
});

async function waitForRecord(h: GatewayHarness, callId: string): Promise<{ promptIds: number[]; outputIds: number[] }> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const e = h.records.find((r) => r.payload.callId === callId);
    if (e)
      return {
        promptIds: h.requestsFor(e.payload.sessionId).find((r) => r.requestId === callId)!.promptIds,
        outputIds: Array.from(e.payload.outputIds),
      };
    if (Date.now() > deadline) throw new Error(`no record of ${callId}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
