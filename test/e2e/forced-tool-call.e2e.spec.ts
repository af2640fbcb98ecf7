import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateText, streamText, tool } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { z } from 'zod';
import { TOPICS, type EventEnvelope } from '@anvil/contracts';
import { createBus, type MessageBus, type Subscription } from '@anvil/messaging';
import { createScratchDatabase, startService, waitFor, type ScratchDatabase, type ServiceProcess } from '@anvil/testing';
import { ByteTokenizer, parseAssistantOutput, tinyChatFormat } from '@anvil/tokenizer';

/**
 * Forced tool calls that hold, end to end: the built gateway in front of the built
 * inference-proxy serving the embedded engine's built-in tiny RANDOM model, on the real Kafka
 * broker and PostgreSQL. The Vercel AI SDK's generateText throws AI_ToolChoiceViolationError
 * (or InvalidToolInputError) unless the answer holds a valid call of the forced tool; a random
 * model left to itself after the forced opening writes no such call (checked first, through the
 * proxy without a constraint), and with the gateway's constraint it writes one every time.
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS;
const DATABASE_URL = process.env.DATABASE_URL;
if (!KAFKA_BROKERS || !DATABASE_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
const topicPrefix = `e2e-forced-${process.pid}.`;
const ADMIN = 'e2e-forced-tool-call-admin-0123456789abcdef';
const SAMPLES = 20;
let db: ScratchDatabase;
let proxy: ServiceProcess;
let gateway: ServiceProcess;
let bus: MessageBus;
let sub: Subscription;
const records = new Map<string, EventEnvelope<'llm_call.recorded'>>();
const ready = (svc: ServiceProcess) =>
  waitFor(`${svc.app} /readyz`, async () => ((await fetch(`${svc.baseUrl}/readyz`)).status === 200 ? true : undefined), 120_000, 250);

const operands = z.object({ a: z.number().int().min(0).max(999), b: z.number().int().min(0).max(999) });
const tools = {
  add: tool({ description: 'a + b', inputSchema: operands }),
  lookup: tool({ description: 'look a city up', inputSchema: z.object({ city: z.string().max(12), unit: z.enum(['c', 'f']).optional() }) }),
};

beforeAll(async () => {
  db = await createScratchDatabase(DATABASE_URL, 'anvil_e2e_forced_tool');
  const common = { KAFKA_BROKERS, DATABASE_URL: db.url, KAFKA_TOPIC_PREFIX: topicPrefix, LOG_LEVEL: 'info' };
  proxy = await startService('inference-proxy', { ...common, INFERENCE_BACKEND: 'embedded', DEPLOYMENT_NAME: 'e2e-forced' }, 120_000);
  await ready(proxy);
  gateway = await startService(
    'gateway',
    { ...common, GATEWAY_ADMIN_TOKEN: ADMIN, INFERENCE_PROXY_URL: proxy.baseUrl, GATEWAY_POLICY_GROUP: `e2e.forced.policy.${process.pid}` },
    120_000,
  );
  await ready(gateway);
  bus = createBus({ kind: 'kafka', brokers: KAFKA_BROKERS.split(','), clientId: 'e2e-forced-tool-call', topicPrefix });
  sub = await bus.subscribe({
    group: 'e2e.forced-tool-call.records',
    topics: [TOPICS.llmCalls],
    fromBeginning: true,
    handler: async (e) => {
      if (e.type === 'llm_call.recorded') records.set(e.payload.callId, e);
    },
  });
});

afterAll(async () => {
  await sub?.stop();
  await bus?.close();
  await Promise.all([gateway, proxy].map((s) => s?.stop('SIGTERM')));
  await db?.drop();
});

async function session(): Promise<string> {
  const res = await fetch(`${gateway.baseUrl}/admin/v1/sessions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      rolloutId: `e2e-forced-${Math.random()}`,
      groupId: 'e2e-forced-g',
      taskId: 'e2e-forced-t',
      model: 'anvil-tiny',
    }),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { baseUrl: string }).baseUrl;
}

describe('forced tool calls against the embedded tiny random model', () => {
  it('without a constraint the random model does not write a call after the forced opening (what agents saw before)', async () => {
    const f = tinyChatFormat();
    const opening = '<tool_call>\n{"name": "add';
    const prompt = f.tokenizer.encode(f.template.render([{ role: 'user', content: '2+3' }], { addGenerationPrompt: true }) + opening);
    let calls = 0;
    for (let seed = 0; seed < 10; seed++) {
      const res = await fetch(`${proxy.baseUrl}/internal/v1/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          requestId: `raw-${seed}`,
          sessionId: 'raw',
          promptIds: prompt,
          maxTokens: 80,
          seed,
          stopIds: f.stopTokenIds,
        }),
      });
      const r = (await res.json()) as { outputIds: number[] };
      const text = opening + new ByteTokenizer().decode(r.outputIds, { skipSpecialTokens: true });
      calls += parseAssistantOutput(text, { format: 'hermes' }).toolCalls.length;
    }
    expect(calls).toBe(0);
  });

  it(`the Vercel AI SDK gets a valid call every time: toolChoice "required" and a named tool, ${SAMPLES} samples each, and streamed`, async () => {
    const model = createOpenAICompatible({ name: 'anvil', baseURL: await session(), apiKey: 'ignored' })('anvil-tiny');
    const names = new Set<string>();
    for (let i = 0; i < SAMPLES; i++) {
      const r = await generateText({ model, prompt: '2+3', tools, toolChoice: 'required', maxRetries: 0, maxOutputTokens: 120, seed: i });
      expect(r.finishReason).toBe('tool-calls');
      expect(r.toolCalls).toHaveLength(1);
      names.add(r.toolCalls[0].toolName);
      const named = await generateText({
        model,
        prompt: '2+3',
        tools,
        toolChoice: { type: 'tool', toolName: 'add' },
        maxRetries: 0,
        maxOutputTokens: 120,
        seed: 1000 + i,
      });
      expect(named.toolCalls.map((c) => c.toolName)).toEqual(['add']);
      expect(operands.safeParse(named.toolCalls[0].input).success).toBe(true);
    }
    expect(names).toEqual(new Set(['add', 'lookup']));
    const s = streamText({
      model,
      prompt: '7+8',
      tools,
      toolChoice: 'required',
      maxRetries: 0,
      maxOutputTokens: 120,
      onError: () => undefined,
    });
    expect(await s.finishReason).toBe('tool-calls');
    expect(await s.toolCalls).toHaveLength(1);
  });

  it('records the constrained tokens as such, with the log-probs of the distribution they were drawn from', async () => {
    const baseURL = await session();
    const res = await fetch(`${baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer ignored' },
      body: JSON.stringify({
        model: 'anvil-tiny',
        messages: [{ role: 'user', content: '2+3' }],
        tools: [
          {
            type: 'function',
            function: { name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] } },
          },
        ],
        tool_choice: 'required',
        max_tokens: 60,
      }),
    });
    expect(res.status).toBe(200);
    const callId = res.headers.get('x-anvil-call-ids') as string;
    const e = await waitFor('record', async () => records.get(callId), 60_000, 100);
    expect(e.version).toBe(3);
    const marks = Array.from(e.payload.outputConstraint ?? []);
    expect(marks).toHaveLength(e.payload.outputIds.length);
    expect(marks.every((m) => m === 1 || m === 2)).toBe(true);
    // forced tokens (a one-id mask) come from a point mass: log-prob 0
    const forced = marks.map((m, i) => (m === 2 ? e.payload.outputLogprobs[i] : null)).filter((x) => x !== null);
    expect(forced.length).toBeGreaterThan(0);
    expect(forced.every((lp) => lp === 0)).toBe(true);
  });
});
