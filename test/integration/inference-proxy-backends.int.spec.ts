import { afterEach, describe, expect, it } from 'vitest';
import { fixtureGenerate, type FixtureServer, startSglangFixture, startVllmFixture } from '@anvil/testing';
import { BackendUnavailableError, type InferenceBackend, type SamplingParams, SglangBackend, VllmBackend } from '@anvil/inference-proxy';

/** The real vLLM and SGLang clients against the engines' protocol fixtures (local HTTP servers, no Kafka). */
const sampling = (over: Partial<SamplingParams> = {}): SamplingParams => ({
  maxTokens: 12,
  temperature: 1,
  topP: 1,
  topK: 0,
  seed: 7,
  stopIds: [],
  ...over,
});
const fixtures: FixtureServer[] = [];
afterEach(async () => {
  await Promise.all(fixtures.splice(0).map((f) => f.close().catch(() => undefined)));
});

const kinds = [
  { name: 'vllm', start: (o = {}) => startVllmFixture(o), client: (url: string) => new VllmBackend({ url }) },
  { name: 'sglang (cumulative stream)', start: (o = {}) => startSglangFixture(o), client: (url: string) => new SglangBackend({ url }) },
  {
    name: 'sglang (incremental stream)',
    start: (o = {}) => startSglangFixture({ ...o, incremental: true }),
    client: (url: string) => new SglangBackend({ url }),
  },
] as const;

describe.each(kinds)('$name client', ({ start, client }) => {
  const setup = async (opts: { tokenLatencyMs?: number } = {}) => {
    const f = await start(opts);
    fixtures.push(f);
    return { f, b: client(f.url) as InferenceBackend };
  };

  it('streams token ids and logprobs exactly as the engine sampled them', async () => {
    const { b } = await setup();
    const chunks: number[][] = [];
    const prompt = [1, 2, 3, 4];
    const res = await b.generate({ requestId: 'r1', promptIds: prompt, sampling: sampling() }, { onTokens: (c) => chunks.push(c.ids) });
    const expected = fixtureGenerate(prompt, { maxTokens: 12, seed: 7, weights: 'initial' });
    expect(res.outputIds).toEqual(expected.ids);
    expect(res.logprobs).toEqual(expected.logprobs);
    expect(res.finishReason).toBe('length');
    expect(chunks.flat()).toEqual(expected.ids);
    expect(b.inFlight).toBe(0);
  });

  it('returns k alternatives per token when asked (top logprobs), most likely first, the same in chunks and result', async () => {
    const { b } = await setup();
    const chunks: { ids: number[]; logprobs: number[] }[][] = [];
    const prompt = [3, 1, 4, 1];
    const res = await b.generate(
      { requestId: 'rt', promptIds: prompt, sampling: sampling({ topLogprobs: 3 }) },
      { onTokens: (c) => chunks.push(c.topLogprobs ?? []) },
    );
    const expected = fixtureGenerate(prompt, { maxTokens: 12, seed: 7, weights: 'initial' });
    expect(res.outputIds).toEqual(expected.ids);
    expect(res.topLogprobs).toHaveLength(expected.ids.length);
    res.topLogprobs?.forEach((t, i) => {
      // The fixture's distribution puts the sampled token first (fixtureAlternatives).
      expect(t.ids).toHaveLength(3);
      expect(t.ids[0]).toBe(expected.ids[i]);
      expect(t.logprobs[0]).toBe(expected.logprobs[i]);
      expect([...t.logprobs].sort((x, y) => y - x)).toEqual(t.logprobs);
    });
    expect(chunks.flat()).toEqual(res.topLogprobs);
  });

  it('stops on a stop token, keeping it in the output', async () => {
    const { b } = await setup();
    const full = fixtureGenerate([9, 9], { maxTokens: 12, seed: 7, weights: 'initial' });
    const res = await b.generate({ requestId: 'r2', promptIds: [9, 9], sampling: sampling({ stopIds: [full.ids[4]] }) });
    expect(res.outputIds).toEqual(full.ids.slice(0, 5));
    expect(res.finishReason).toBe('stop');
  });

  it('reports prefix-cache hits for a prompt extending an earlier one', async () => {
    const { b } = await setup();
    const first = await b.generate({ requestId: 'a', promptIds: [5, 6, 7], sampling: sampling({ maxTokens: 3 }) });
    const second = await b.generate({ requestId: 'b', promptIds: [5, 6, 7, ...first.outputIds, 8], sampling: sampling({ maxTokens: 3 }) });
    expect(first.cachedPromptTokens).toBe(0);
    expect(second.cachedPromptTokens).toBe(6);
  });

  it('aborts at a token boundary: the engine sees the abort and the partial output is returned', async () => {
    const { f, b } = await setup({ tokenLatencyMs: 10 });
    const controller = new AbortController();
    let seen = 0;
    const res = await b.generate(
      { requestId: 'r3', promptIds: [1], sampling: sampling({ maxTokens: 200 }) },
      {
        signal: controller.signal,
        onTokens: (c) => {
          seen += c.ids.length;
          if (seen >= 3) controller.abort();
        },
      },
    );
    expect(res.finishReason).toBe('abort');
    expect(res.outputIds.length).toBe(seen);
    await expect.poll(() => f.stats.aborted).toBe(1);
    expect(f.running).toBe(0);
  });

  it('loads new weights from a checkpoint path and generates with them', async () => {
    const { f, b } = await setup();
    await b.loadWeights({ version: 3, checkpointUri: '/ckpt/v3' });
    expect(f.stats.loads).toEqual(['/ckpt/v3']);
    const res = await b.generate({ requestId: 'r4', promptIds: [1, 2], sampling: sampling({ maxTokens: 4 }) });
    expect(res.outputIds).toEqual(fixtureGenerate([1, 2], { maxTokens: 4, seed: 7, weights: '/ckpt/v3' }).ids);
    await expect(b.loadWeights({ version: 4, checkpointUri: 'fail:/ckpt/v4' })).rejects.toThrow();
  });

  it('answers health and turns a dead engine into BackendUnavailableError, keeping streamed tokens', async () => {
    const { f, b } = await setup({ tokenLatencyMs: 10 });
    expect((await b.health()).ok).toBe(true);
    const got: number[] = [];
    const pending = b.generate(
      { requestId: 'r5', promptIds: [3], sampling: sampling({ maxTokens: 500 }) },
      {
        onTokens: (c) => {
          got.push(...c.ids);
          if (got.length === 4) void f.kill();
        },
      },
    );
    await expect(pending).rejects.toBeInstanceOf(BackendUnavailableError);
    expect(got.length).toBeGreaterThanOrEqual(4);
    expect((await b.health()).ok).toBe(false);
    await expect(b.generate({ requestId: 'r6', promptIds: [3], sampling: sampling() })).rejects.toBeInstanceOf(BackendUnavailableError);
  });
});

describe('wire format', () => {
  it('vLLM: token-id prompt, logprobs of the sampled token, ids as token_id:<n>, usage in the stream', async () => {
    const f = await startVllmFixture();
    fixtures.push(f);
    await new VllmBackend({ url: f.url, model: 'policy' }).generate({
      requestId: 'w',
      promptIds: [1, 2],
      sampling: sampling({ topK: 5, stopIds: [2] }),
    });
    expect(f.stats.lastRequest).toMatchObject({
      model: 'policy',
      prompt: [1, 2],
      max_tokens: 12,
      top_k: 5,
      seed: 7,
      stop_token_ids: [2],
      logprobs: 0,
      return_tokens_as_token_ids: true,
      skip_special_tokens: false,
      include_stop_str_in_output: true,
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it('SGLang: input_ids, rid, sampling_params and return_logprob', async () => {
    const f = await startSglangFixture();
    fixtures.push(f);
    await new SglangBackend({ url: f.url }).generate({ requestId: 'rid-1', promptIds: [4], sampling: sampling() });
    expect(f.stats.lastRequest).toMatchObject({
      rid: 'rid-1',
      input_ids: [4],
      sampling_params: {
        max_new_tokens: 12,
        top_k: -1,
        stop_token_ids: [],
        skip_special_tokens: false,
        no_stop_trim: true,
        sampling_seed: 7,
      },
      return_logprob: true,
      stream: true,
    });
  });

  it('vLLM without VLLM_SERVER_DEV_MODE: the weight load fails loudly', async () => {
    const f = await startVllmFixture({ devMode: false });
    fixtures.push(f);
    await expect(new VllmBackend({ url: f.url }).loadWeights({ version: 1, checkpointUri: '/x' })).rejects.toThrow(
      /collective_rpc answered 404/,
    );
  });
});
