// Tree == flat: log-probs, entropies and every parameter gradient from one merged prefix-tree
// pack equal those of running each sample as its own sequence.
import { describe, expect, it } from 'vitest';
import { buildPack, flatPack, mergeSampleValues, unmergeNodeValues } from '@anvil/rl';
import { Model, ModelConfigInput, analyzeTree } from './index';
import { randInt, randn, randomTreeSamples, rng } from './test-support';

const CONFIGS: Array<[string, ModelConfigInput]> = [
  [
    'GQA 4/2 + qkv bias + tied embeddings',
    {
      vocabSize: 61,
      hiddenSize: 32,
      intermediateSize: 48,
      numHiddenLayers: 2,
      numAttentionHeads: 4,
      numKeyValueHeads: 2,
      attentionBias: true,
      tieWordEmbeddings: true,
    },
  ],
  [
    'GQA 4/1 untied + llama3 rope scaling',
    {
      vocabSize: 50,
      hiddenSize: 32,
      intermediateSize: 40,
      numHiddenLayers: 2,
      numAttentionHeads: 4,
      numKeyValueHeads: 1,
      ropeScaling: { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 32 },
    },
  ],
  [
    'head_dim 72 (wide vector kernels), GQA 2/1',
    { vocabSize: 41, hiddenSize: 32, intermediateSize: 40, numHiddenLayers: 1, numAttentionHeads: 2, numKeyValueHeads: 1, headDim: 72 },
  ],
  [
    'qwen2 MHA (bias) untied, 3 layers',
    {
      modelType: 'qwen2',
      vocabSize: 97,
      hiddenSize: 24,
      intermediateSize: 56,
      numHiddenLayers: 3,
      numAttentionHeads: 2,
      numKeyValueHeads: 2,
      ropeTheta: 1e6,
    },
  ],
];

async function gradsOf(model: Model, pack: { tokens: Int32Array; parents: Int32Array }, dlogp: Float32Array, dent: Float32Array) {
  await model.zeroGrad();
  const fw = await model.forward(pack);
  await model.backward(fw, dlogp, dent);
  const grads = new Map(model.tensors.map((t) => [t.name, Float64Array.from(t.grad)]));
  fw.handle.dispose();
  return { fw, grads };
}

describe('tree attention: merged pack == flat samples', () => {
  CONFIGS.forEach(([label, cfg], ci) => {
    for (let trial = 0; trial < 2; trial++) {
      it(`${label} (trial ${trial})`, async () => {
        const r = rng(1000 * ci + trial + 1);
        const model = Model.create(cfg, { seed: ci * 10 + trial, initStd: 0.2 });
        const samples = randomTreeSamples(r, model.config.vocabSize, randInt(r, 6, 14));
        const merged = buildPack(samples);
        const flat = flatPack(samples);
        expect(merged.uniqueTokens).toBeLessThan(flat.uniqueTokens); // the test is vacuous without sharing
        const info = analyzeTree(merged.parents);
        const roots = Array.from(merged.parents).filter((p) => p < 0).length;
        expect(info.maxDepth).toBeGreaterThan(3);

        // per-sample loss coefficients, as a trainer computes them per sample token
        const coef = samples.map((s) => Float32Array.from(s.outputIds, () => randn(r)));
        const ecoef = samples.map((s) => Float32Array.from(s.outputIds, () => 0.3 * randn(r)));
        const m = await gradsOf(model, merged, mergeSampleValues(merged, coef), mergeSampleValues(merged, ecoef));
        const f = await gradsOf(model, flat, mergeSampleValues(flat, coef), mergeSampleValues(flat, ecoef));

        const lm = unmergeNodeValues(merged, m.fw.logp),
          lf = unmergeNodeValues(flat, f.fw.logp);
        const em = unmergeNodeValues(merged, m.fw.entropy),
          ef = unmergeNodeValues(flat, f.fw.entropy);
        for (let s = 0; s < samples.length; s++)
          for (let t = 0; t < lm[s].length; t++) {
            expect(Math.abs(lm[s][t] - lf[s][t])).toBeLessThan(1e-5);
            expect(Math.abs(em[s][t] - ef[s][t])).toBeLessThan(1e-5);
          }
        for (const t of model.tensors) {
          const a = m.grads.get(t.name)!,
            b = f.grads.get(t.name)!;
          let diff = 0,
            norm = 0;
          for (let i = 0; i < a.length; i++) {
            diff += (a[i] - b[i]) ** 2;
            norm += b[i] ** 2;
          }
          expect(Math.sqrt(norm), `${t.name} has a gradient`).toBeGreaterThan(0);
          expect(Math.sqrt(diff), t.name).toBeLessThanOrEqual(1e-4 * Math.sqrt(norm));
        }
        expect(roots).toBeGreaterThanOrEqual(1);
        model.dispose();
      });
    }
  });

  it('derives pre-order, subtree ends and depths: j sees i iff pre[i] <= pre[j] < end[i]', () => {
    const r = rng(7);
    const samples = randomTreeSamples(r, 20, 30);
    // shuffle-free but non-DFS order: reverse sibling order by rebuilding with children first-seen last
    const pack = buildPack(samples);
    const info = analyzeTree(pack.parents);
    const n = pack.tokens.length;
    const isAnc = (i: number, j: number) => {
      for (let a = j; a >= 0; a = pack.parents[a]) if (a === i) return true;
      return false;
    };
    for (let j = 0; j < n; j++) {
      let d = 0;
      for (let a = pack.parents[j]; a >= 0; a = pack.parents[a]) d++;
      expect(info.depth[j]).toBe(d);
      for (let i = 0; i < n; i++) expect(info.pre[i] <= info.pre[j] && info.pre[j] < info.end[i]).toBe(isAnc(i, j));
    }
    // a topologically ordered but not pre-ordered input: parents precede children, siblings interleaved
    const parents = new Int32Array([-1, 0, 0, 1, 2, 1, -1, 6]);
    const t = analyzeTree(parents);
    expect(Array.from(t.order)).toEqual([0, 1, 3, 5, 2, 4, 6, 7]);
    expect(Array.from(t.end)).toEqual([6, 4, 6, 3, 6, 4, 8, 8]);
  });
});
