// A 49k vocabulary (SmolLM2's 49152): the LM head's logits [nodes with children, V] would be the
// largest tensor of a pack, so past 256 MiB they are never stored but computed in chunks, in the
// forward and again in the backward, and the pack's memory stays linear in its length with a
// small constant. Kept and recomputed logits must give the same log-probs and gradients.
import { describe, expect, it } from 'vitest';
import { Model, ModelConfigInput } from './index';

const V = 49152;
const CFG: ModelConfigInput = {
  vocabSize: V,
  hiddenSize: 64,
  intermediateSize: 96,
  numHiddenLayers: 1,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
  tieWordEmbeddings: true,
};

function chain(n: number) {
  const tokens = Int32Array.from({ length: n }, (_, i) => (i * 7919) % V);
  const parents = Int32Array.from({ length: n }, (_, i) => i - 1);
  const coef = Float32Array.from(parents, (p) => (p < 0 ? 0 : -1 / n));
  return { tokens, parents, coef };
}

describe('49k vocabulary: bounded LM-head memory', () => {
  it('a 2k-token pack: logits (400 MB) are recomputed in chunks, the pack needs a small fraction of that', async () => {
    const m = Model.create(CFG, { seed: 1 });
    const p = chain(2100);
    const logitBytes = (p.tokens.length - 1) * V * 4;
    const rss0 = process.memoryUsage().rss;
    const f = await m.forward(p);
    await m.backward(f, p.coef);
    const rss1 = process.memoryUsage().rss;
    // kept activations + one chunk of ~8M logits, not [M, V]
    expect(f.handle.peakBytes).toBeLessThan(96 * 2 ** 20);
    expect(f.handle.peakBytes).toBeLessThan(logitBytes / 4);
    expect(rss1 - rss0).toBeLessThan(logitBytes / 2);
    expect(f.logp.every((x, i) => (i === 0 ? x === 0 : Number.isFinite(x) && x < 0))).toBe(true);
    f.handle.dispose();
    m.dispose();
  });

  it('kept and recomputed logits give the same log-probs, entropies and gradients', async () => {
    const m = Model.create(CFG, { seed: 2 });
    const p = chain(300);
    const run = async (logits: 'keep' | 'recompute') => {
      await m.zeroGrad();
      const f = await m.forward(p, { logits });
      await m.backward(
        f,
        p.coef,
        Float32Array.from(p.coef, (c) => 0.1 * c),
      );
      const out = {
        logp: f.logp,
        entropy: f.entropy,
        bytes: f.handle.activationBytes,
        grads: m.tensors.map((t) => Float32Array.from(t.grad)),
      };
      f.handle.dispose();
      return out;
    };
    const k = await run('keep'),
      r = await run('recompute');
    expect(k.bytes - r.bytes).toBeGreaterThanOrEqual(299 * V * 4); // the kept logits
    expect(r.logp).toEqual(k.logp);
    expect(r.entropy).toEqual(k.entropy);
    let worst = 0;
    k.grads.forEach((g, i) => g.forEach((v, j) => (worst = Math.max(worst, Math.abs(v - r.grads[i][j]) / Math.max(1, Math.abs(v))))));
    expect(worst).toBeLessThanOrEqual(1e-6);
    m.dispose();
  });
});
