// Constrained decoding in the generator: a per-step allowed-token mask, sampling from the policy
// restricted to it and renormalised, log-probs of that constrained distribution.
import { afterAll, describe, expect, it } from 'vitest';
import { Generator, Model, type TokenConstraint } from './index';

const V = 97;
const model = Model.create(
  {
    vocabSize: V,
    hiddenSize: 32,
    intermediateSize: 64,
    numHiddenLayers: 2,
    numAttentionHeads: 4,
    numKeyValueHeads: 2,
    maxPositionEmbeddings: 64,
  },
  { seed: 7, initStd: 0.3 },
);
afterAll(() => model.dispose());
const words = Math.ceil(V / 32);
const prompt = [5, 18, 31, 44, 57, 70];

const maskOf = (ids: readonly number[]) => {
  const m = new Uint32Array(words);
  for (const id of ids) m[id >>> 5] |= 1 << (id & 31);
  return m;
};
/** The same allowed set at every step; records what it was told. */
const fixed = (ids: readonly number[]) => {
  const seen: { remaining: number[]; advanced: number[] } = { remaining: [], advanced: [] };
  const constraint: TokenConstraint = {
    allowed: (remaining) => (seen.remaining.push(remaining), maskOf(ids)),
    advance: (id) => void seen.advanced.push(id),
  };
  return { constraint, seen };
};

/** log p(j | seq) for every id j: one forward over seq with all V ids as children of its last token. */
async function nextLogp(seq: number[]): Promise<Float64Array> {
  const tokens = Int32Array.from([...seq, ...Array.from({ length: V }, (_, j) => j)]);
  const parents = Int32Array.from(tokens, (_, i) => (i < seq.length ? i - 1 : seq.length - 1));
  const fw = await model.forward({ tokens, parents });
  fw.handle.dispose();
  return Float64Array.from({ length: V }, (_, j) => fw.logp[seq.length + j]);
}
const logsumexp = (xs: number[]) => {
  const m = Math.max(...xs);
  return m + Math.log(xs.reduce((s, x) => s + Math.exp(x - m), 0));
};

describe('constrained generation (allowed-token masks)', () => {
  it('a mask of one token always yields it, with log-prob 0 under the constrained distribution and the policy raw', async () => {
    const gen = new Generator(model, { prefixCacheBytes: 0 });
    const forcedIds = [9, 90, 33, 33, 0, 96];
    let step = 0;
    const constraint: TokenConstraint = { allowed: () => maskOf([forcedIds[step]]), advance: () => void step++ };
    for (const temperature of [1, 0.3, 0]) {
      step = 0;
      const g = await gen.generate(prompt, { maxTokens: forcedIds.length, temperature, topK: 3, seed: 1 }, { constraint });
      expect(g.outputIds).toEqual(forcedIds);
      expect(g.logprobs).toEqual(forcedIds.map(() => 0));
      let seq = [...prompt];
      for (let i = 0; i < forcedIds.length; i++) {
        const lp = await nextLogp(seq);
        expect(Math.abs(g.rawLogprobs[i] - lp[forcedIds[i]])).toBeLessThan(1e-4);
        seq = [...seq, forcedIds[i]];
      }
    }
    await gen.close();
  });

  it('log-probs are those of the renormalised distribution within the mask (temperature, greedy, top-k)', async () => {
    const gen = new Generator(model, { prefixCacheBytes: 0 });
    const allowed = [2, 11, 40, 41, 77, 95];
    const lp = await nextLogp(prompt);
    const inMask = allowed.map((j) => lp[j]);
    for (const T of [1, 0.6, 1.7]) {
      for (let seed = 0; seed < 20; seed++) {
        const g = await gen.generate(prompt, { maxTokens: 1, temperature: T, seed }, fixed(allowed));
        const tok = g.outputIds[0];
        expect(allowed).toContain(tok);
        expect(Math.abs(g.logprobs[0] - (lp[tok] / T - logsumexp(inMask.map((x) => x / T))))).toBeLessThan(2e-4);
        expect(Math.abs(g.rawLogprobs[0] - lp[tok])).toBeLessThan(1e-4);
      }
    }
    // greedy: the argmax among the allowed ids, reported under the renormalised policy
    const best = allowed[inMask.indexOf(Math.max(...inMask))];
    const greedy = await gen.generate(prompt, { maxTokens: 1, temperature: 0 }, fixed(allowed));
    expect(greedy.outputIds).toEqual([best]);
    expect(Math.abs(greedy.logprobs[0] - (lp[best] - logsumexp(inMask)))).toBeLessThan(2e-4);
    // top-k within the mask: only the 2 most likely allowed ids, renormalised over those 2
    const top2 = [...allowed].sort((a, b) => lp[b] - lp[a]).slice(0, 2);
    for (let seed = 0; seed < 30; seed++) {
      const g = await gen.generate(prompt, { maxTokens: 1, temperature: 1, topK: 2, seed }, fixed(allowed));
      expect(top2).toContain(g.outputIds[0]);
      expect(Math.abs(g.logprobs[0] - (lp[g.outputIds[0]] - logsumexp(top2.map((j) => lp[j]))))).toBeLessThan(2e-4);
    }
    await gen.close();
  });

  it('draws follow the constrained distribution (frequencies over many seeds)', async () => {
    const gen = new Generator(model, { prefixCacheBytes: 0, maxBatch: 64 });
    const allowed = [3, 50, 51, 88];
    const lp = await nextLogp(prompt);
    const z = logsumexp(allowed.map((j) => lp[j]));
    const n = 2000;
    const draws = await Promise.all(Array.from({ length: n }, (_, seed) => gen.generate(prompt, { maxTokens: 1, seed }, fixed(allowed))));
    for (const j of allowed) {
      const p = Math.exp(lp[j] - z);
      const freq = draws.filter((g) => g.outputIds[0] === j).length / n;
      expect(Math.abs(freq - p)).toBeLessThan(4 * Math.sqrt((p * (1 - p)) / n) + 1e-3);
    }
    await gen.close();
  });

  it('tells the constraint the tokens left, reports each sampled id, and runs beside unconstrained sequences', async () => {
    const gen = new Generator(model, { prefixCacheBytes: 0 });
    const { constraint, seen } = fixed([7, 8]);
    const [c, free] = await Promise.all([
      gen.generate(prompt, { maxTokens: 5, seed: 3 }, { constraint }),
      gen.generate(prompt, { maxTokens: 5, seed: 3 }),
    ]);
    expect(seen.remaining).toEqual([5, 4, 3, 2, 1]);
    expect(seen.advanced).toEqual(c.outputIds);
    expect(c.outputIds.every((id) => id === 7 || id === 8)).toBe(true);
    const alone = await gen.generate(prompt, { maxTokens: 5, seed: 3 });
    expect(free.outputIds).toEqual(alone.outputIds); // the batch neighbour is not affected by the mask
    // stop ids work as usual
    const stopped = await gen.generate(prompt, { maxTokens: 5, seed: 3, stopIds: [8] }, fixed([8]));
    expect(stopped).toMatchObject({ outputIds: [8], finishReason: 'stop' });
    await gen.close();
  });

  it('a failing constraint rejects its own generation only (throws, wrong size, allows nothing)', async () => {
    const gen = new Generator(model, { prefixCacheBytes: 0 });
    const bad: TokenConstraint[] = [
      {
        allowed: () => {
          throw new Error('grammar broke');
        },
        advance: () => undefined,
      },
      { allowed: () => new Uint32Array(words + 1), advance: () => undefined },
      { allowed: () => new Uint32Array(words), advance: () => undefined },
      {
        allowed: () => maskOf([4]),
        advance: () => {
          throw new Error('advance broke');
        },
      },
    ];
    const results = await Promise.allSettled([
      ...bad.map((constraint) => gen.generate(prompt, { maxTokens: 4, seed: 1 }, { constraint })),
      gen.generate(prompt, { maxTokens: 4, seed: 1 }),
    ]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected', 'rejected', 'fulfilled']);
    const reasons = results.slice(0, 4).map((r) => String((r as PromiseRejectedResult).reason));
    expect(reasons[0]).toMatch(/grammar broke/);
    expect(reasons[1]).toMatch(/Uint32Array of 4 words/);
    expect(reasons[2]).toMatch(/allows no token/);
    expect(reasons[3]).toMatch(/advance broke/);
    expect((results[4] as PromiseFulfilledResult<{ outputIds: number[] }>).value.outputIds).toHaveLength(4);
    await gen.close();
  });

  it('the native step refuses masks of the wrong size or that allow nothing (bits past the vocabulary do not count)', async () => {
    const gen = new Generator(model, { prefixCacheBytes: 0 });
    const nat = (
      gen as unknown as { native: { add: (...a: unknown[]) => number; step: (ids: number[], m?: unknown[]) => Promise<unknown> } }
    ).native;
    nat.add(1, Int32Array.from(prompt), 1, 1, 0, 1);
    expect(() => nat.step([1], [new Uint32Array(2)])).toThrow(/needs 4/);
    const beyond = new Uint32Array(words);
    beyond[words - 1] = 1 << 31; // id 127 >= 97
    expect(() => nat.step([1], [beyond])).toThrow(/allows no token/);
    expect(() => nat.step([1], [null, null])).toThrow(/one mask/);
    await gen.close();
  });
});

describe('the CUDA check of constrained generation (cuda-constrained-checks.ts)', () => {
  it('passes against itself on the CPU backend, so on a GPU machine it measures the device only', async () => {
    const { constrainedGenerationMatchesCpu } = await import('./cuda-constrained-checks');
    const r = await constrainedGenerationMatchesCpu(
      {
        vocabSize: 300,
        hiddenSize: 64,
        intermediateSize: 128,
        numHiddenLayers: 2,
        numAttentionHeads: 4,
        numKeyValueHeads: 2,
        maxPositionEmbeddings: 128,
      },
      'cpu',
    );
    expect(r.detail).toMatch(/12\/12 the CPU's constrained greedy choice/);
    expect(r.passed).toBe(true);
  });
});
