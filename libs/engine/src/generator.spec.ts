// Generation: tied to the training forward (the reference path), batching ≡ alone, prefix cache ≡
// cold, sampling semantics, abort, event loop, invalid inputs.
import { afterAll, describe, expect, it } from 'vitest';
import { createGenerator, type Generation, Generator, Model } from './index';

const cfg = {
  vocabSize: 97,
  hiddenSize: 32,
  intermediateSize: 64,
  numHiddenLayers: 2,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
  maxPositionEmbeddings: 64,
};
const model = Model.create(cfg, { seed: 7, initStd: 0.2 });
// a Qwen2-style variant: q/k/v bias, untied head, no GQA
const model2 = Model.create({ ...cfg, numKeyValueHeads: 4, attentionBias: true, tieWordEmbeddings: false }, { seed: 3, initStd: 0.2 });
for (const t of model2.tensors) if (t.name.endsWith('.bias')) t.data.forEach((_, i) => (t.data[i] = Math.sin(i) * 0.1));
afterAll(() => {
  model.dispose();
  model2.dispose();
});

const prompt = (n: number, off = 0) => Array.from({ length: n }, (_, i) => (i * 13 + off * 7 + 5) % 97);

async function forwardLogp(m: Model, seq: number[]): Promise<Float32Array> {
  const fw = await m.forward({ tokens: Int32Array.from(seq), parents: Int32Array.from(seq, (_, i) => i - 1) });
  fw.handle.dispose();
  return fw.logp;
}

describe('generation', () => {
  it('sampled log-probs (temperature 1) equal the training forward over prompt + output', async () => {
    for (const m of [model, model2]) {
      const gen = new Generator(m, { prefixCacheBytes: 0 });
      const p = prompt(9);
      const g = await gen.generate(p, { maxTokens: 20, temperature: 1, seed: 11 });
      expect(g.outputIds).toHaveLength(20);
      expect(g.finishReason).toBe('length');
      const logp = await forwardLogp(m, [...p, ...g.outputIds]);
      g.outputIds.forEach((_, i) => {
        expect(Math.abs(g.logprobs[i] - logp[p.length + i])).toBeLessThan(1e-4);
        expect(Math.abs(g.rawLogprobs[i] - logp[p.length + i])).toBeLessThan(1e-4);
      });
      // greedy picks the argmax: its raw logprob is the largest of the position
      const gg = await gen.generate(p, { maxTokens: 8, temperature: 0 });
      const lg = await forwardLogp(m, [...p, ...gg.outputIds]);
      gg.outputIds.forEach((_, i) => expect(Math.abs(gg.logprobs[i] - lg[p.length + i])).toBeLessThan(1e-4));
      await gen.close();
    }
  });

  it('with temperature and top-k: rawLogprobs are the policy, logprobs the processed distribution', async () => {
    const gen = new Generator(model, { prefixCacheBytes: 0 });
    const p = prompt(6, 2);
    const T = 0.7;
    const K = 10;
    const g = await gen.generate(p, { maxTokens: 6, temperature: T, topK: K, seed: 4 });
    const seq = [...p, ...g.outputIds];
    for (let i = 0; i < g.outputIds.length; i++) {
      const logp = await nextTokenLogp(model, seq.slice(0, p.length + i));
      const tok = g.outputIds[i];
      expect(Math.abs(g.rawLogprobs[i] - logp[tok])).toBeLessThan(1e-4);
      // processed: softmax(logp / T) renormalised over the K most likely ids
      const top = [...logp.keys()].sort((a, b) => logp[b] - logp[a]).slice(0, K);
      const mx = logp[top[0]] / T;
      const lse = mx + Math.log(top.reduce((acc, k) => acc + Math.exp(logp[k] / T - mx), 0));
      expect(Math.abs(g.logprobs[i] - (logp[tok] / T - lse))).toBeLessThan(1e-4);
    }
    await gen.close();
  });

  it('batched decode of several sequences equals decoding each alone', async () => {
    const gen = new Generator(model, { prefixCacheBytes: 0 });
    const reqs = [0, 1, 2, 3].map((k) => ({
      p: prompt(3 + 4 * k, k),
      s: { maxTokens: 6 + 3 * k, temperature: 0.9, topK: k ? 20 : 0, seed: 100 + k },
    }));
    const alone: Generation[] = [];
    for (const r of reqs) alone.push(await gen.generate(r.p, r.s));
    const stepsAlone = gen.stats().steps;
    expect(stepsAlone).toBe(alone.reduce((a, g) => a + g.outputIds.length, 0));
    const together = await Promise.all(reqs.map((r) => gen.generate(r.p, r.s)));
    // one batched step per decoded position: as many steps as the longest output
    expect(gen.stats().steps - stepsAlone).toBe(Math.max(...alone.map((g) => g.outputIds.length)));
    together.forEach((g, k) => {
      expect(g.outputIds).toEqual(alone[k].outputIds);
      g.logprobs.forEach((lp, i) => expect(Math.abs(lp - alone[k].logprobs[i])).toBeLessThan(1e-5));
    });
    await gen.close();
  });

  it('a prefix-cache hit gives the same outputs and log-probs as a cold run, and counts hit tokens', async () => {
    const cold = new Generator(model, { prefixCacheBytes: 0 });
    const warm = new Generator(model);
    const p = prompt(20, 3);
    const first = await warm.generate(p, { maxTokens: 10, seed: 5 });
    expect(first.cachedPromptTokens).toBe(0);
    // the next turn of the session: earlier prompt + output + new user tokens
    const next = [...p, ...first.outputIds, 4, 5, 6];
    const hit = await warm.generate(next, { maxTokens: 10, seed: 9 });
    const ref = await cold.generate(next, { maxTokens: 10, seed: 9 });
    expect(hit.cachedPromptTokens).toBe(p.length + first.outputIds.length - 1);
    expect(ref.cachedPromptTokens).toBe(0);
    expect(hit.outputIds).toEqual(ref.outputIds);
    hit.logprobs.forEach((lp, i) => expect(Math.abs(lp - ref.logprobs[i])).toBeLessThan(1e-5));
    const st = warm.stats();
    expect(st.prefixCacheHitTokens).toBe(hit.cachedPromptTokens);
    expect(st.prefixCacheLookupTokens).toBe(p.length + next.length);
    expect(st.prefixCacheBytes).toBeGreaterThan(0);
    // the same prompt again reuses all but its last token
    expect((await warm.generate(p, { maxTokens: 1, seed: 5 })).cachedPromptTokens).toBe(p.length - 1);
    warm.clearPrefixCache();
    expect(warm.stats().prefixCacheBytes).toBe(0);
    await cold.close();
    await warm.close();
  });

  it('seeds, top-k / top-p support, stop ids and max tokens', async () => {
    const gen = new Generator(model, { prefixCacheBytes: 0 });
    const p = prompt(5);
    const a = await gen.generate(p, { maxTokens: 15, seed: 42 });
    const b = await gen.generate(p, { maxTokens: 15, seed: 42 });
    const c = await gen.generate(p, { maxTokens: 15, seed: 43 });
    expect(a.outputIds).toEqual(b.outputIds);
    expect(a.outputIds).not.toEqual(c.outputIds);
    // top-k: every sampled id is among the k most likely under the policy at that position
    for (const [topK, topP] of [
      [3, 1],
      [0, 0.5],
      [10, 0.3],
    ] as const) {
      const g = await gen.generate(p, { maxTokens: 12, topK, topP, temperature: 1.3, seed: 1 });
      const seq = [...p, ...g.outputIds];
      for (let i = 0; i < g.outputIds.length; i++) {
        const ctx = seq.slice(0, p.length + i);
        // the policy distribution at this position, from the reference forward over all candidates
        const probs = await nextTokenLogp(model, ctx);
        const order = [...probs.keys()].sort((x, y) => probs[y] - probs[x]);
        const scaled = order.map((k) => probs[k] / 1.3);
        let allowed = topK ? order.slice(0, topK) : order;
        if (topP < 1) {
          const mx = Math.max(...scaled);
          const e = allowed.map((_, j) => Math.exp(scaled[j] - mx));
          const S = e.reduce((x, y) => x + y, 0);
          let cum = 0;
          let keep = allowed.length;
          for (let j = 0; j < e.length; j++) {
            cum += e[j];
            if (cum >= topP * S - 1e-6) {
              keep = j + 1;
              break;
            }
          }
          allowed = allowed.slice(0, keep + 1); // +1: tolerance at the float boundary
        }
        expect(allowed).toContain(g.outputIds[i]);
      }
    }
    // top-k = 1 is greedy: processed logprob 0
    const k1 = await gen.generate(p, { maxTokens: 5, topK: 1, seed: 3 });
    const greedy = await gen.generate(p, { maxTokens: 5, temperature: 0 });
    expect(k1.outputIds).toEqual(greedy.outputIds);
    k1.logprobs.forEach((lp) => expect(Math.abs(lp)).toBeLessThan(1e-6));
    // stop ids: the stop token ends the output and is part of it
    const stopId = a.outputIds[4];
    const s = await gen.generate(p, { maxTokens: 15, seed: 42, stopIds: [stopId] });
    expect(s.finishReason).toBe('stop');
    expect(s.outputIds).toEqual(a.outputIds.slice(0, a.outputIds.indexOf(stopId) + 1));
    expect(a.finishReason).toBe('length');
    expect((await gen.generate(p, { maxTokens: 0 })).outputIds).toEqual([]);
    // positions: a sequence stops at maxPositions with 'length'
    const full = await gen.generate(prompt(60), { maxTokens: 50, seed: 1 });
    expect(full.outputIds).toHaveLength(4);
    expect(full.finishReason).toBe('length');
    await gen.close();
  });

  it('abort mid-generation resolves with abort; the event loop keeps turning', async () => {
    const big = Model.create(
      {
        vocabSize: 2048,
        hiddenSize: 256,
        intermediateSize: 512,
        numHiddenLayers: 4,
        numAttentionHeads: 4,
        numKeyValueHeads: 2,
        maxPositionEmbeddings: 4096,
      },
      { seed: 1 },
    );
    const gen = new Generator(big);
    let ticks = 0;
    let spinning = true;
    const spin = () => {
      if (!spinning) return;
      ticks++;
      setImmediate(spin);
    };
    setImmediate(spin);
    const ac = new AbortController();
    const seen: number[] = [];
    const p = gen.generate(
      prompt(600),
      { maxTokens: 3000, seed: 1 },
      {
        signal: ac.signal,
        onToken: (id) => {
          seen.push(id);
          if (seen.length === 5) ac.abort();
        },
      },
    );
    const other = gen.generate(prompt(10), { maxTokens: 3, seed: 2 });
    // stats() and clearPrefixCache() never wait on the event loop for the step in flight (the 600-token prefill)
    await new Promise((r) => setTimeout(r, 20));
    const t0 = performance.now();
    const st = gen.stats();
    expect(st.activeSequences + st.queuedSequences).toBe(2);
    gen.clearPrefixCache();
    expect(performance.now() - t0).toBeLessThan(15);
    const g = await p;
    spinning = false;
    expect(g.finishReason).toBe('abort');
    expect(g.outputIds).toEqual(seen);
    expect(g.outputIds.length).toBeLessThan(8);
    expect((await other).outputIds).toHaveLength(3);
    expect(ticks).toBeGreaterThan(5);
    // already aborted: resolves at once
    expect((await gen.generate(prompt(4), { maxTokens: 5 }, { signal: AbortSignal.abort() })).finishReason).toBe('abort');
    expect(gen.stats().activeSequences).toBe(0);
    await gen.close();
    big.dispose();
  });

  it('top log-probs: the k most likely tokens under the policy, sorted, consistent with the training forward', async () => {
    const gen = new Generator(model, { prefixCacheBytes: 0 });
    const p = prompt(9, 4);
    const tops: Array<Array<{ id: number; logprob: number }>> = [];
    const g = await gen.generate(
      p,
      { maxTokens: 6, temperature: 0, topLogprobs: 5, seed: 1 },
      { onToken: (_i, _lp, _raw, top) => tops.push(top ?? []) },
    );
    expect(g.topLogprobs).toHaveLength(6);
    expect(tops).toEqual(g.topLogprobs);
    // each alternative's log-prob is the training forward's log-prob of that token at that position
    const fw = await Promise.all(
      g.outputIds.map(async (_, t) => {
        const seq = [...p, ...g.outputIds.slice(0, t)];
        return Promise.all(g.topLogprobs![t].map((alt) => forwardLogp(model, [...seq, alt.id]).then((lp) => lp[seq.length])));
      }),
    );
    g.topLogprobs!.forEach((top, t) => {
      expect(top).toHaveLength(5);
      expect(top[0].id).toBe(g.outputIds[t]); // greedy: the most likely token was taken
      expect(top[0].logprob).toBeCloseTo(g.rawLogprobs[t], 5);
      for (let i = 1; i < top.length; i++) expect(top[i].logprob).toBeLessThanOrEqual(top[i - 1].logprob);
      expect(new Set(top.map((x) => x.id)).size).toBe(5);
      top.forEach((alt, i) => expect(alt.logprob).toBeCloseTo(fw[t][i], 3));
    });
    // sampled (temperature 1): the sampled token's raw log-prob never exceeds the best alternative's
    const s = await gen.generate(p, { maxTokens: 6, temperature: 1, topLogprobs: 3, seed: 9 });
    s.topLogprobs!.forEach((top, t) => expect(s.rawLogprobs[t]).toBeLessThanOrEqual(top[0].logprob + 1e-6));
    // not asked: no arrays
    expect((await gen.generate(p, { maxTokens: 2, temperature: 0 })).topLogprobs).toBeUndefined();
    await expect(gen.generate(p, { maxTokens: 2, topLogprobs: 21 })).rejects.toThrow(/topLogprobs/);
    await gen.close();
  });

  it('invalid inputs are JS errors, not crashes', async () => {
    const gen = new Generator(model);
    await expect(gen.generate([1, 97], { maxTokens: 2 })).rejects.toThrow(/out of range/);
    await expect(gen.generate([1, -1], { maxTokens: 2 })).rejects.toThrow(/out of range/);
    await expect(gen.generate([], { maxTokens: 2 })).rejects.toThrow(/empty prompt/);
    await expect(gen.generate(prompt(64), { maxTokens: 2 })).rejects.toThrow(/no room/);
    await expect(gen.generate([1.5], { maxTokens: 2 })).rejects.toThrow(/integer/);
    await expect(gen.generate([1], { maxTokens: 2, topP: 0 })).rejects.toThrow(/topP/);
    await expect(gen.generate([1], { maxTokens: -1 })).rejects.toThrow(/maxTokens/);
    expect((await gen.generate([1, 2], { maxTokens: 2 })).outputIds).toHaveLength(2); // still alive
    await gen.close();
  });

  it('createGenerator: tiny model by seed, checkpoint reload clears the prefix cache', async () => {
    const { mkdtempSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const a = await createGenerator(undefined, { seed: 1 });
    const b = await createGenerator(undefined, { seed: 1 });
    const p = [1, 2, 3, 4];
    const ga = await a.generate(p, { maxTokens: 6, temperature: 0 });
    expect((await b.generate(p, { maxTokens: 6, temperature: 0 })).outputIds).toEqual(ga.outputIds);
    const other = Model.tiny({ seed: 2 });
    const dir = mkdtempSync(join(tmpdir(), 'anvil-gen-'));
    try {
      await other.save(dir);
      const before = a.stats();
      expect(before.prefixCacheEntries).toBe(1);
      await a.loadCheckpoint(dir);
      expect(a.stats().prefixCacheEntries).toBe(0);
      const after = await a.generate(p, { maxTokens: 6, temperature: 0 });
      const c = await createGenerator(other, {});
      expect(after.outputIds).toEqual((await c.generate(p, { maxTokens: 6, temperature: 0 })).outputIds);
      await c.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
      other.dispose();
      await a.close();
      await b.close();
    }
  });
});

/** log p(next token = k | ctx) for every k, from the training forward over ctx + k. */
async function nextTokenLogp(m: Model, ctx: number[]): Promise<number[]> {
  const V = m.config.vocabSize;
  // a tree: the context chain with V leaf children
  const tokens = [...ctx, ...Array.from({ length: V }, (_, k) => k)];
  const parents = [...ctx.map((_, i) => i - 1), ...Array.from({ length: V }, () => ctx.length - 1)];
  const fw = await m.forward({ tokens: Int32Array.from(tokens), parents: Int32Array.from(parents) });
  fw.handle.dispose();
  return Array.from(fw.logp.slice(ctx.length));
}
