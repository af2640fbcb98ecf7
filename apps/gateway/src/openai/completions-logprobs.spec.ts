import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { tinyChatFormat } from '@anvil/tokenizer';
import { startGatewayHarness, type GatewayHarness } from '../testing/gateway-harness';

/**
 * Streamed /v1/completions and top logprobs (chat `logprobs: true, top_logprobs: k`, completions
 * `logprobs: k`), through the official SDK against the in-process gateway and a scripted proxy
 * whose alternatives are the sampled id, then the next ids, each 1 nat less likely.
 */
const tok = tinyChatFormat().tokenizer;
const EOT = 258;
const script = (req: { promptIds: number[] }) => {
  const prompt = tok.decode(req.promptIds);
  if (prompt.includes('stop test')) return { ids: [...tok.encode('abc STOP def'), EOT] };
  if (prompt.includes('reserved test')) return { ids: [...tok.encode('a'), 265, ...tok.encode('b'), EOT] }; // <|reserved_0|>: special, but not a stop id
  return { ids: [...tok.encode('Once upon a time, a fox.'), EOT] };
};

describe('streamed completions and top logprobs', () => {
  let h: GatewayHarness;
  let client: OpenAI;
  beforeAll(async () => {
    h = await startGatewayHarness({ script });
    const s = await h.createSession({ rolloutId: 'r-completions' });
    client = new OpenAI({ baseURL: `${h.baseUrl}/v1`, apiKey: s.apiKey, maxRetries: 0 });
  });
  afterAll(async () => {
    await h?.close();
  });

  it('streams /v1/completions: the chunks add up to the JSON answer, then finish_reason, usage and [DONE], the call recorded', async () => {
    const json = await client.completions.create({ model: 'anvil-tiny', prompt: 'Tell a story', max_tokens: 64 });
    const { data: stream, response } = await client.completions
      .create({ model: 'anvil-tiny', prompt: 'Tell a story', max_tokens: 64, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let text = '';
    const finishes: (string | null)[] = [];
    let usage: OpenAI.CompletionUsage | undefined;
    let chunks = 0;
    for await (const c of stream) {
      chunks++;
      for (const choice of c.choices) {
        text += choice.text;
        finishes.push(choice.finish_reason);
      }
      if (c.usage) usage = c.usage;
    }
    expect(chunks).toBeGreaterThan(2);
    expect(text).toBe(json.choices[0].text);
    expect(text).toBe('Once upon a time, a fox.'); // the end-of-turn id ends the output, it is not text
    expect(finishes.filter(Boolean)).toEqual(['stop']);
    expect(usage?.completion_tokens).toBe(json.usage?.completion_tokens);
    const [callId] = (response.headers.get('x-anvil-call-ids') ?? '').split(',');
    for (let i = 0; i < 100 && !h.records.some((r) => r.payload.callId === callId); i++) await new Promise((r) => setTimeout(r, 20));
    expect(h.records.find((r) => r.payload.callId === callId)?.payload.outputIds.length).toBe(usage?.completion_tokens);
  });

  it('never streams any part of a stop string: the streamed text ends before it, as the JSON answer does', async () => {
    const stream = await client.completions.create({
      model: 'anvil-tiny',
      prompt: 'stop test',
      max_tokens: 64,
      stop: ['STOP'],
      stream: true,
    });
    const pieces: string[] = [];
    for await (const c of stream) pieces.push(...c.choices.map((x) => x.text));
    expect(pieces.join('')).toBe('abc ');
    expect(pieces.some((p) => p.includes('S'))).toBe(false);
  });

  it('chat logprobs with top_logprobs: k alternatives per token, the sampled one first (JSON and stream alike)', async () => {
    const req = {
      model: 'anvil-tiny',
      messages: [{ role: 'user' as const, content: 'hi' }],
      max_tokens: 64,
      logprobs: true,
      top_logprobs: 3,
    };
    const json = await client.chat.completions.create(req);
    const content = json.choices[0].logprobs?.content ?? [];
    expect(content.length).toBe('Once upon a time, a fox.'.length);
    for (const entry of content) {
      expect(entry.top_logprobs).toHaveLength(3);
      expect(entry.top_logprobs[0]).toEqual({ token: entry.token, logprob: entry.logprob, bytes: entry.bytes });
      expect(entry.top_logprobs[1].logprob).toBe(entry.logprob - 1);
    }
    const stream = await client.chat.completions.create({ ...req, stream: true });
    const streamed: OpenAI.Chat.ChatCompletionTokenLogprob[] = [];
    for await (const c of stream) streamed.push(...(c.choices[0]?.logprobs?.content ?? []));
    expect(streamed).toEqual(content);
  });

  it('chat logprobs leave out only what the text leaves out: a special token that is not a stop id has its entry, so there is one per completion token but the end of turn', async () => {
    const json = await client.chat.completions.create({
      model: 'anvil-tiny',
      messages: [{ role: 'user', content: 'reserved test' }],
      max_tokens: 64,
      logprobs: true,
    });
    expect(json.choices[0].message.content).toBe('a<|reserved_0|>b');
    const content = json.choices[0].logprobs?.content ?? [];
    expect(content.map((c) => c.token)).toEqual(['a', '<|reserved_0|>', 'b']);
    expect(json.usage?.completion_tokens).toBe(content.length + 1); // + the end-of-turn id, which ends the reply and has no text
  });

  it('completions logprobs: k gives a {token: logprob} map of k alternatives per token, and text offsets', async () => {
    const json = await client.completions.create({ model: 'anvil-tiny', prompt: 'Tell a story', max_tokens: 64, logprobs: 2 });
    const lp = json.choices[0].logprobs;
    // Every sampled token is listed, the end-of-turn id included.
    expect(lp?.tokens?.join('')).toBe(`${json.choices[0].text}<|im_end|>`);
    expect(lp?.top_logprobs).toHaveLength(lp?.tokens?.length ?? -1);
    lp?.top_logprobs?.forEach((alts, i) => {
      expect(Object.keys(alts)).toHaveLength(2);
      expect(alts[lp.tokens![i]]).toBe(lp.token_logprobs![i]);
    });
    expect(lp?.text_offset?.slice(0, 3)).toEqual([0, 1, 2]);
  });

  it('refuses top_logprobs without logprobs: true (400, as OpenAI does)', async () => {
    await expect(
      client.chat.completions.create({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'hi' }], top_logprobs: 2 }),
    ).rejects.toMatchObject({ status: 400, param: 'top_logprobs' });
  });
});
