import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI, { APIError } from 'openai';
import { generateText, tool } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { z } from 'zod';
import type { GenerateRequest } from '@anvil/contracts';
import { ConstraintCompiler } from '@anvil/guided-decoding';
import { tinyChatFormat } from '@anvil/tokenizer';
import { startGatewayHarness, type GatewayHarness } from '../testing/gateway-harness';

/**
 * A forced tool choice sends the rest of the call as a constraint: the proxy gets the grammar
 * (the offered names, the template's frame, each tool's argument schema) and the record marks
 * the constrained tokens. The "model" here samples at random among the ids the grammar allows
 * (guided-decoding over the byte vocabulary, as the embedded engine does), so every answer is a
 * call that the Vercel AI SDK accepts. test/e2e/forced-tool-call.e2e.spec.ts does the same
 * against the real engine.
 */
const tok = tinyChatFormat().tokenizer;
const compiler = new ConstraintCompiler(tok);
let seed = 1;
const random = () => (seed = (seed * 1664525 + 1013904223) >>> 0) / 2 ** 32;
/** Samples within the request's grammar (uniformly among allowed ids); plain text without one. */
const script = (req: GenerateRequest) => {
  if (!req.constraint) return { ids: [...tok.encode('I would rather talk.'), 258] };
  const c = compiler.constraint(req.constraint.grammar, req.stopIds);
  const ids: number[] = [];
  const marks: number[] = [];
  for (let i = 0; i < req.maxTokens; i++) {
    const mask = c.allowed(req.maxTokens - i);
    const allowed: number[] = [];
    mask.forEach((w, k) => {
      for (let b = 0; b < 32; b++) if (w & (1 << b)) allowed.push(k * 32 + b);
    });
    const id = allowed[Math.floor(random() * allowed.length)];
    marks.push(c.lastAllowedCount === 1 ? 2 : 1);
    c.advance(id);
    ids.push(id);
    if (req.stopIds.includes(id)) break;
  }
  return { ids, constrained: marks };
};

const operands = z.object({ a: z.number().int(), b: z.number().int().min(0).max(99) });
const sdkTools = { add: tool({ description: 'a + b', inputSchema: operands }), mul: tool({ description: 'a * b', inputSchema: operands }) };
const tools: OpenAI.Chat.ChatCompletionFunctionTool[] = [
  {
    type: 'function',
    function: {
      name: 'add',
      parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] },
    },
  },
  { type: 'function', function: { name: 'say', parameters: { type: 'object', properties: { text: { type: 'string', maxLength: 6 } } } } },
];

describe('forced tool calls are constrained', () => {
  let h: GatewayHarness;
  beforeAll(async () => {
    h = await startGatewayHarness({ script });
  });
  afterAll(() => h?.close());
  const client = async () => new OpenAI({ baseURL: `${h.baseUrl}/v1`, apiKey: (await h.createSession()).apiKey, maxRetries: 0 });

  it('"required": the proxy gets the grammar of the whole call, the reply is a call, the record marks its tokens', async () => {
    const sdk = await client();
    const { data, response } = await sdk.chat.completions
      .create({ model: 'anvil-tiny', messages: [{ role: 'user', content: '2+3' }], tools, tool_choice: 'required', max_tokens: 60 })
      .withResponse();
    expect(data.choices[0].finish_reason).toBe('tool_calls');
    const call = data.choices[0].message.tool_calls?.[0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    expect(['add', 'say']).toContain(call.function.name);
    expect(() => JSON.parse(call.function.arguments)).not.toThrow();
    const callId = response.headers.get('x-anvil-call-ids') as string;
    const req = h.proxy.requests.find((r) => r.requestId === callId) as GenerateRequest;
    expect(req.constraint?.grammar).toEqual({
      oneOf: [
        { seq: [{ text: 'add", "arguments": ' }, { json: tools[0].function.parameters }, { text: '}\n</tool_call>' }] },
        { seq: [{ text: 'say", "arguments": ' }, { json: tools[1].function.parameters }, { text: '}\n</tool_call>' }] },
      ],
    });
    const record = await waitForRecord(h, callId);
    const marks = Array.from((record.payload as { outputConstraint?: Uint8Array }).outputConstraint ?? []);
    expect(marks).toHaveLength(record.payload.outputIds.length);
    expect(new Set(marks)).toEqual(new Set([1, 2]));
  });

  it('the Vercel AI SDK gets a valid call every time (required and a named tool, many samples)', async () => {
    const model = createOpenAICompatible({ name: 'anvil', baseURL: `${h.baseUrl}/v1`, apiKey: (await h.createSession()).apiKey })(
      'anvil-tiny',
    );
    for (let i = 0; i < 15; i++) {
      const required = await generateText({
        model,
        prompt: '3*4',
        tools: sdkTools,
        toolChoice: 'required',
        maxRetries: 0,
        maxOutputTokens: 80,
      });
      expect(required.finishReason).toBe('tool-calls');
      expect(required.toolCalls).toHaveLength(1);
      expect(operands.safeParse(required.toolCalls[0].input).success).toBe(true);
      const named = await generateText({
        model,
        prompt: '12+7',
        tools: sdkTools,
        toolChoice: { type: 'tool', toolName: 'mul' },
        maxRetries: 0,
        maxOutputTokens: 80,
      });
      expect(named.toolCalls.map((c) => c.toolName)).toEqual(['mul']);
      expect(operands.safeParse(named.toolCalls[0].input).success).toBe(true);
    }
  });

  it('a forced choice of a tool whose schema cannot be enforced is a 400 naming it (nothing recorded); "auto" is unaffected', async () => {
    const sdk = await client();
    const patterned: OpenAI.Chat.ChatCompletionTool[] = [
      {
        type: 'function',
        function: { name: 'lookup', parameters: { type: 'object', properties: { id: { type: 'string', pattern: '^[a-z]+$' } } } },
      },
    ];
    const before = h.records.length;
    const err = await sdk.chat.completions
      .create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'x' }], tools: patterned, tool_choice: 'required' })
      .catch((e: unknown) => e as APIError);
    expect((err as APIError).status).toBe(400);
    expect((err as APIError).code).toBe('unsupported_tool_schema');
    expect((err as APIError).message).toMatch(/tool `lookup`.*`pattern` cannot be enforced/);
    const auto = await sdk.chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'x' }], tools: patterned });
    expect(auto.choices[0].message.content).toBe('I would rather talk.');
    await new Promise((r) => setTimeout(r, 100));
    expect(h.records.length).toBe(before + 1);
  });
});

async function waitForRecord(h: GatewayHarness, callId: string) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const e = h.records.find((r) => r.payload.callId === callId);
    if (e) return e;
    if (Date.now() > deadline) throw new Error(`no record of ${callId}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
