import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateText, streamText, tool, ToolChoiceViolationError } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { z } from 'zod';
import { tinyChatFormat } from '@anvil/tokenizer';
import { startGatewayHarness, type GatewayHarness } from '../testing/gateway-harness';

/**
 * tool_choice through the Vercel AI SDK, which checks the answer: generateText throws
 * ToolChoiceViolationError when toolChoice is "required" or names a tool and the reply holds no
 * such call. The same scripted model as tool-choice.spec.ts (it completes a tool call only when
 * the prompt already opened one), so a passing call means the gateway's forced opening made the
 * answer; the last case shows the SDK's check is live by letting the model ignore that opening.
 */
const tok = tinyChatFormat().tokenizer;
const EOT = 258;
let ignoreForcedOpening = false;
const script = (req: { promptIds: number[] }) => {
  const prompt = tok.decode(req.promptIds);
  if (!ignoreForcedOpening && prompt.endsWith('<tool_call>\n{"name": "add'))
    return { ids: [...tok.encode('", "arguments": {"a": 12, "b": 7}}\n</tool_call>'), EOT] };
  if (!ignoreForcedOpening && prompt.endsWith('<tool_call>\n{"name": "'))
    return { ids: [...tok.encode('mul", "arguments": {"a": 3, "b": 4}}\n</tool_call>'), EOT] };
  return { ids: [...tok.encode('I would rather talk.'), EOT] };
};
const operands = z.object({ a: z.number().int(), b: z.number().int() });
const tools = { add: tool({ description: 'a + b', inputSchema: operands }), mul: tool({ description: 'a * b', inputSchema: operands }) };

describe('tool_choice is enforced (Vercel AI SDK)', () => {
  let h: GatewayHarness;
  beforeAll(async () => {
    h = await startGatewayHarness({ script });
  });
  afterAll(() => h?.close());
  const model = async () =>
    createOpenAICompatible({ name: 'anvil', baseURL: `${h.baseUrl}/v1`, apiKey: (await h.createSession()).apiKey })('anvil-tiny');

  it('a named tool: generateText accepts the answer, a call of that tool', async () => {
    const r = await generateText({
      model: await model(),
      prompt: '12+7',
      tools,
      toolChoice: { type: 'tool', toolName: 'add' },
      maxRetries: 0,
    });
    expect(r.finishReason).toBe('tool-calls');
    expect(r.toolCalls.map((c) => [c.toolName, c.input])).toEqual([['add', { a: 12, b: 7 }]]);
  });

  it('"required": generateText and streamText accept the answer, a call of one of the tools', async () => {
    const r = await generateText({ model: await model(), prompt: '3*4', tools, toolChoice: 'required', maxRetries: 0 });
    expect(r.finishReason).toBe('tool-calls');
    expect(r.toolCalls.map((c) => [c.toolName, c.input])).toEqual([['mul', { a: 3, b: 4 }]]);

    const s = streamText({ model: await model(), prompt: '3*4', tools, toolChoice: 'required', maxRetries: 0, onError: () => undefined });
    expect(await s.finishReason).toBe('tool-calls');
    expect((await s.toolCalls).map((c) => [c.toolName, c.input])).toEqual([['mul', { a: 3, b: 4 }]]);
    expect(await s.text).toBe('');
  });

  it('the SDK check is live: a model that ignores the forced opening makes generateText throw', async () => {
    ignoreForcedOpening = true;
    try {
      const m = await model();
      await expect(generateText({ model: m, prompt: '3*4', tools, toolChoice: 'required', maxRetries: 0 })).rejects.toSatisfy((e) =>
        ToolChoiceViolationError.isInstance(e),
      );
      await expect(
        generateText({ model: m, prompt: '12+7', tools, toolChoice: { type: 'tool', toolName: 'add' }, maxRetries: 0 }),
      ).rejects.toSatisfy((e) => ToolChoiceViolationError.isInstance(e));
    } finally {
      ignoreForcedOpening = false;
    }
  });
});
