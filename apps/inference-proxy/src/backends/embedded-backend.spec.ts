// The embedded backend over the real native engine (built-in tiny model): streaming, log-probs
// tied to the training forward, prefix-cache hits across a session's calls, abort, refusals and
// weight loads.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BYTE_VOCAB_SIZE, ByteTokenizer } from '@anvil/tokenizer';
import type { InferenceProxyConfig } from '../config';
import { BackendRequestError, type SamplingParams, type TokenChunk } from './backend';
import { createBackends } from './create-backends';
import { EmbeddedBackend } from './embedded-backend';
import { createEngineGenerator } from './embedded-generator';

const sampling = (over: Partial<SamplingParams> = {}): SamplingParams => ({
  maxTokens: 12,
  temperature: 1,
  topP: 1,
  topK: 0,
  seed: 7,
  stopIds: [],
  ...over,
});

describe('EmbeddedBackend over @anvil/engine', async () => {
  // lazily, as the proxy itself loads the engine (only the embedded backend needs the addon)
  const { Model } = await import('@anvil/engine');
  const backend = new EmbeddedBackend(await createEngineGenerator(undefined, { seed: 1 }));
  afterAll(() => backend.close());

  it('streams tokens whose log-probs equal the training forward of the same model', async () => {
    const chunks: TokenChunk[] = [];
    const prompt = [1, 2, 3, 4, 5, 6, 7];
    const r = await backend.generate({ requestId: 'a', promptIds: prompt, sampling: sampling() }, { onTokens: (c) => chunks.push(c) });
    expect(r.finishReason).toBe('length');
    expect(r.outputIds).toHaveLength(12);
    expect(chunks.flatMap((c) => c.ids)).toEqual(r.outputIds);
    expect(chunks.flatMap((c) => c.logprobs)).toEqual(r.logprobs);
    const ref = Model.tiny({ seed: 1 });
    const seq = [...prompt, ...r.outputIds];
    const fw = await ref.forward({ tokens: Int32Array.from(seq), parents: Int32Array.from(seq, (_, i) => i - 1) });
    fw.handle.dispose();
    ref.dispose();
    r.logprobs.forEach((lp, i) => expect(Math.abs(lp - fw.logp[prompt.length + i])).toBeLessThan(1e-4));
    // the session's next call reuses the KV of the first
    const next = await backend.generate({ requestId: 'b', promptIds: [...seq, 9, 10], sampling: sampling({ stopIds: [r.outputIds[0]] }) });
    expect(next.cachedPromptTokens).toBe(seq.length - 1);
    const health = await backend.health();
    expect(health.ok).toBe(true);
    expect(JSON.parse(health.detail!)).toMatchObject({ prefixCacheHitTokens: seq.length - 1 });
  });

  it("passes the engine's top logprobs on (k per token, the same in chunks and result; greedy: the sampled token first)", async () => {
    const chunks: TokenChunk[] = [];
    const r = await backend.generate(
      { requestId: 'top', promptIds: [3, 1, 4, 1, 5], sampling: sampling({ temperature: 0, maxTokens: 5, topLogprobs: 3 }) },
      { onTokens: (c) => chunks.push(c) },
    );
    expect(r.topLogprobs).toHaveLength(5);
    expect(chunks.flatMap((c) => c.topLogprobs ?? [])).toEqual(r.topLogprobs);
    r.topLogprobs?.forEach((t, i) => {
      expect(t.ids).toHaveLength(3);
      expect(t.ids[0]).toBe(r.outputIds[i]); // greedy picks the most likely token
      expect([...t.logprobs].sort((a, b) => b - a)).toEqual(t.logprobs);
    });
    expect(
      (await backend.generate({ requestId: 'none', promptIds: [3, 1], sampling: sampling({ maxTokens: 2 }) })).topLogprobs,
    ).toBeUndefined();
  });

  it('aborts at a token boundary, refuses invalid prompts with a request error', async () => {
    const ac = new AbortController();
    let n = 0;
    const r = await backend.generate(
      { requestId: 'c', promptIds: [3, 4], sampling: sampling({ maxTokens: 5000 }) },
      { signal: ac.signal, onTokens: () => ++n === 3 && ac.abort() },
    );
    expect(r.finishReason).toBe('abort');
    expect(r.outputIds).toHaveLength(3);
    expect(backend.inFlight).toBe(0);
    await expect(backend.generate({ requestId: 'd', promptIds: [1, 999_999], sampling: sampling() })).rejects.toBeInstanceOf(
      BackendRequestError,
    );
    await expect(backend.generate({ requestId: 'e', promptIds: [], sampling: sampling() })).rejects.toThrow(/empty prompt/);
  });

  it('loadWeights switches the weights (same config: in place) and later generations use them', async () => {
    const other = Model.tiny({ seed: 2 });
    const dir = mkdtempSync(join(tmpdir(), 'anvil-embedded-'));
    try {
      await other.save(dir);
      const greedy = { requestId: 'f', promptIds: [5, 6, 7], sampling: sampling({ temperature: 0, maxTokens: 8 }) };
      const before = await backend.generate(greedy);
      await backend.loadWeights({ version: 1, checkpointUri: pathToFileURL(dir).href });
      const after = await backend.generate(greedy);
      expect(after.cachedPromptTokens).toBe(0); // the prefix cache was cleared
      const ref = new EmbeddedBackend(await createEngineGenerator(dir));
      expect((await ref.generate(greedy)).outputIds).toEqual(after.outputIds);
      expect(after.outputIds).not.toEqual(before.outputIds);
      await ref.close();
    } finally {
      other.dispose();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("createBackends builds the embedded replica without a checkpoint dir (built-in tiny model over the byte tokenizer's vocabulary)", async () => {
    const [b] = await createBackends({ INFERENCE_BACKEND: 'embedded' } as InferenceProxyConfig);
    expect(b.kind).toBe('embedded');
    expect(b.id).toBe('embedded-tiny-random-seed0');
    expect(b.model).toBe('built-in tiny model (random init, seed 0)');
    // the built-in model and the built-in tokenizer share one vocabulary, so every sampled id decodes
    expect(b.vocabSize).toBe(BYTE_VOCAB_SIZE);
    const tok = new ByteTokenizer();
    const r = await b.generate({ requestId: 'g', promptIds: tok.encode('hello'), sampling: sampling({ maxTokens: 64 }) });
    expect(r.outputIds).toHaveLength(64);
    for (const id of r.outputIds) expect(tok.idToToken(id), `id ${id}`).toBeDefined();
    await b.close?.();
  });
});
