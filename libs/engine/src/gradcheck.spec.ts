// Analytic gradients vs finite differences for every parameter kind, on a tiny model with a
// branching tree, a loss that uses both log-probs and entropies (L = sum a_i logp_i + e_i H_i).
import { describe, expect, it } from 'vitest';
import { Model, ModelConfigInput, TensorView } from './index';
import { randn, rng } from './test-support';

// a tree with two roots and branching at several depths
const tokens = new Int32Array([3, 7, 1, 9, 4, 4, 2, 8, 5, 0, 6, 11, 12, 3]);
const parents = new Int32Array([-1, 0, 1, 2, 2, 1, 5, 5, 7, -1, 9, 10, 10, 12]);

async function lossOf(model: Model, a: Float32Array, e: Float32Array): Promise<number> {
  const fw = await model.forward({ tokens, parents });
  let L = 0;
  for (let i = 0; i < tokens.length; i++) L += a[i] * fw.logp[i] + e[i] * fw.entropy[i];
  fw.handle.dispose();
  return L;
}

async function check(cfg: ModelConfigInput, seed: number): Promise<Map<string, number>> {
  const r = rng(seed);
  const model = Model.create(cfg, { seed, initStd: 0.25 });
  for (const t of model.tensors) {
    if (t.name.endsWith('.bias')) t.data.forEach((_, i) => (t.data[i] = 0.3 * randn(r)));
    if (t.name.includes('norm')) t.data.forEach((_, i) => (t.data[i] = 1 + 0.3 * randn(r)));
  }
  const a = Float32Array.from(parents, (p) => (p < 0 ? 0 : randn(r)));
  const e = Float32Array.from(parents, (p) => (p < 0 ? 0 : 0.5 * randn(r)));
  await model.zeroGrad();
  const fw = await model.forward({ tokens, parents });
  await model.backward(fw, a, e);
  fw.handle.dispose();
  const worst = new Map<string, number>();
  const h = 1e-2;
  for (const t of model.tensors as TensorView[]) {
    const g = Float64Array.from(t.grad);
    const gmax = g.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
    expect(gmax, `${t.name} has a nonzero gradient`).toBeGreaterThan(1e-3);
    // the 3 largest entries and 3 random ones with a non-negligible gradient
    const idx = [...g.keys()].sort((x, y) => Math.abs(g[y]) - Math.abs(g[x])).slice(0, 3);
    const cands = [...g.keys()].filter((i) => Math.abs(g[i]) > 0.05 * gmax && !idx.includes(i));
    for (let k = 0; k < 3 && cands.length; k++) idx.push(cands.splice(Math.floor(r() * cands.length), 1)[0]);
    let w = 0;
    for (const i of idx) {
      const x0 = t.data[i];
      const at = async (d: number) => {
        t.data[i] = x0 + d;
        return lossOf(model, a, e);
      };
      // 4-point central difference: truncation error O(h^4), so f32 rounding dominates
      const fd = (8 * ((await at(h)) - (await at(-h))) - ((await at(2 * h)) - (await at(-2 * h)))) / (12 * h);
      t.data[i] = x0;
      const rel = Math.abs(fd - g[i]) / Math.max(Math.abs(fd), Math.abs(g[i]));
      w = Math.max(w, rel);
    }
    worst.set(t.name, w);
  }
  model.dispose();
  return worst;
}

describe('gradients vs finite differences', () => {
  it('untied llama with q/k/v bias and GQA: every tensor kind', async () => {
    const worst = await check(
      {
        vocabSize: 16,
        hiddenSize: 16,
        intermediateSize: 24,
        numHiddenLayers: 2,
        numAttentionHeads: 4,
        numKeyValueHeads: 2,
        attentionBias: true,
      },
      11,
    );
    const kinds = [
      'embed_tokens',
      'q_proj.weight',
      'k_proj.weight',
      'v_proj.weight',
      'o_proj',
      'q_proj.bias',
      'k_proj.bias',
      'v_proj.bias',
      'gate_proj',
      'up_proj',
      'down_proj',
      'input_layernorm',
      'post_attention_layernorm',
      'model.norm',
      'lm_head',
    ];
    for (const k of kinds)
      expect(
        [...worst.keys()].some((n) => n.includes(k)),
        k,
      ).toBe(true);
    for (const [name, rel] of worst) expect(rel, name).toBeLessThan(1e-2);
  });

  it('head_dim 40 (vector attention kernels, 32-wide + 8-wide tails)', async () => {
    const worst = await check(
      { vocabSize: 16, hiddenSize: 16, intermediateSize: 16, numHiddenLayers: 1, numAttentionHeads: 2, numKeyValueHeads: 1, headDim: 40 },
      13,
    );
    for (const [name, rel] of worst) expect(rel, name).toBeLessThan(1e-2);
  });

  it('tied qwen2 (embedding gets both the input and the LM-head gradient)', async () => {
    const worst = await check(
      {
        modelType: 'qwen2',
        vocabSize: 16,
        hiddenSize: 16,
        intermediateSize: 20,
        numHiddenLayers: 1,
        numAttentionHeads: 2,
        numKeyValueHeads: 1,
        tieWordEmbeddings: true,
      },
      12,
    );
    for (const [name, rel] of worst) expect(rel, name).toBeLessThan(1e-2);
  });
});
