import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateText, stepCountIs, streamText, tool, type LanguageModel } from 'ai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { z } from 'zod';
import { tinyChatFormat } from '@anvil/tokenizer';
import { sessionRecords, startGatewayHarness, type GatewayHarness } from '../testing/gateway-harness';
import type { ScriptedReply } from '../testing/fake-inference-proxy';

/**
 * The Vercel AI SDK's Responses provider (`openai.responses(...)`, @ai-sdk/openai) and its
 * Anthropic provider (@ai-sdk/anthropic), unchanged, against the in-process gateway: a
 * multi-step tool loop (the SDK runs the tool and sends its result back) where every step after
 * the first extends the one before token-exactly, streamed and not, and a required tool choice
 * the SDK checks (it throws when the reply holds no call).
 */
const tok = tinyChatFormat().tokenizer;
const EOT = 258;
const ids = (text: string) => tok.encode(text);

function script(req: { promptIds: number[] }): ScriptedReply {
  const prompt = tok.decode(req.promptIds);
  const lastUser = prompt.slice(prompt.lastIndexOf('<|im_start|>user'));
  if (prompt.endsWith('<tool_call>\n{"name": "')) return { ids: [...ids('add", "arguments": {"a": 3, "b": 4}}\n</tool_call>'), EOT] };
  if (lastUser.includes('<tool_response>')) return { ids: [...ids('It is 19.'), EOT] };
  if (lastUser.includes('12+7'))
    return { ids: [...ids('Adding.\n<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 7}}\n</tool_call>'), EOT] };
  return { ids: [...ids('Hello there.'), EOT] };
}

const add = tool({
  description: 'a + b',
  inputSchema: z.object({ a: z.number(), b: z.number() }),
  execute: async ({ a, b }) => a + b,
});

/** Request bodies the providers sent (to see which input shapes the gateway was given). */
const sent: { url: string; body: Record<string, unknown> }[] = [];
const recordingFetch: typeof fetch = async (url, init) => {
  if (typeof init?.body === 'string') sent.push({ url: String(url), body: JSON.parse(init.body) as Record<string, unknown> });
  return fetch(url, init);
};

describe('Vercel AI SDK providers (Responses and Anthropic)', () => {
  let h: GatewayHarness;
  beforeAll(async () => {
    h = await startGatewayHarness({ script });
  });
  afterAll(() => h?.close());

  const providers: Record<string, (h: GatewayHarness, key: string) => LanguageModel> = {
    'openai.responses': (g, key) =>
      createOpenAI({ baseURL: `${g.baseUrl}/v1`, apiKey: key, fetch: recordingFetch }).responses('anvil-tiny'),
    anthropic: (g, key) => createAnthropic({ baseURL: `${g.baseUrl}/v1`, apiKey: key, fetch: recordingFetch })('anvil-tiny'),
  };

  for (const [name, make] of Object.entries(providers)) {
    it(`${name}: a tool loop (generateText and streamText) whose second step extends the first token-exactly`, async () => {
      for (const mode of ['generate', 'stream'] as const) {
        const s = await h.createSession();
        const model = make(h, s.apiKey);
        const options = { model, prompt: 'What is 12+7?', tools: { add }, stopWhen: stepCountIs(3), maxRetries: 0, maxOutputTokens: 256 };
        const r = mode === 'generate' ? await generateText(options) : streamText(options);
        expect(await r.text, `${name} ${mode}`).toBe('It is 19.');
        const steps = await r.steps;
        expect(steps).toHaveLength(2);
        expect(steps[0].toolCalls.map((c) => [c.toolName, c.input])).toEqual([['add', { a: 12, b: 7 }]]);
        expect(steps[0].toolResults.map((t) => t.output)).toEqual([19]);
        if (name === 'openai.responses') {
          // With store on (its default) the provider sends its earlier assistant text as an item_reference to the stored response.
          const input = sent.filter((b) => b.url.endsWith('/responses')).at(-1)?.body.input as { type?: string }[];
          expect(input.map((i) => i.type ?? 'message')).toEqual(['message', 'item_reference', 'function_call', 'function_call_output']);
        }
        const [first, second] = await sessionRecords(h, s.sessionId, 2);
        expect(second.payload.parentCallId, `${name} ${mode}`).toBe(first.payload.callId);
        const reused = first.payload.promptIds.length + first.payload.outputIds.length;
        expect(Array.from(second.payload.promptIds.slice(0, reused))).toEqual([...first.payload.promptIds, ...first.payload.outputIds]);
      }
    });

    it(`${name}: toolChoice "required" is answered with a call, which the SDK checks`, async () => {
      const s = await h.createSession();
      const r = await generateText({ model: make(h, s.apiKey), prompt: 'sum', tools: { add }, toolChoice: 'required', maxRetries: 0 });
      expect(r.toolCalls.map((c) => [c.toolName, c.input])).toEqual([['add', { a: 3, b: 4 }]]);
    });
  }
});
