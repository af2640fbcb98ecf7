// LoRA in the engine: the adapters' gradients against finite differences (with and without
// dropout) and against the full-weight gradient projected onto them, a frozen base, merging,
// generation with unmerged adapters, and configs that must be refused without changing anything.
import { describe, expect, it } from 'vitest';
import { createGenerator, LoraConfigError, LoraOptions, Model, ModelConfigInput, TensorView } from './index';
import { randn, rng } from './test-support';

// a tree with two roots and branching at several depths (as gradcheck.spec.ts)
const tokens = new Int32Array([3, 7, 1, 9, 4, 4, 2, 8, 5, 0, 6, 11, 12, 3]);
const parents = new Int32Array([-1, 0, 1, 2, 2, 1, 5, 5, 7, -1, 9, 10, 10, 12]);

const CFG: ModelConfigInput = {
  modelType: 'qwen2', // q/k/v biases
  vocabSize: 16,
  hiddenSize: 16,
  intermediateSize: 24,
  numHiddenLayers: 2,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
  tieWordEmbeddings: true,
};
const ALL = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

/** A model with LoRA on every target and B random (nonzero), so that A has a gradient too. */
async function loraModel(seed: number, opts: Partial<LoraOptions> = {}): Promise<Model> {
  const m = Model.create(CFG, { seed, initStd: 0.25 });
  await m.enableLora({ rank: 3, alpha: 6, targets: ALL, seed, ...opts });
  const r = rng(seed + 100);
  for (const t of m.loraTensors) if (t.name.includes('lora_B')) t.data.forEach((_, i) => (t.data[i] = 0.3 * randn(r)));
  return m;
}

function coefficients(seed: number) {
  const r = rng(seed);
  return {
    a: Float32Array.from(parents, (p) => (p < 0 ? 0 : randn(r))),
    e: Float32Array.from(parents, (p) => (p < 0 ? 0 : 0.5 * randn(r))),
  };
}

async function lossOf(m: Model, a: Float32Array, e: Float32Array, fw: { train?: boolean; dropoutSeed?: number }) {
  const f = await m.forward({ tokens, parents }, fw);
  let L = 0;
  for (let i = 0; i < tokens.length; i++) L += a[i] * f.logp[i] + e[i] * f.entropy[i];
  f.handle.dispose();
  return L;
}

/** Worst relative error of the analytic adapter gradients against 4-point central differences. */
async function finiteDifferences(m: Model, seed: number, fw: { train?: boolean; dropoutSeed?: number }) {
  const { a, e } = coefficients(seed);
  await m.zeroGrad();
  const f = await m.forward({ tokens, parents }, fw);
  await m.backward(f, a, e);
  f.handle.dispose();
  const r = rng(seed + 7);
  let worst = 0;
  let checked = 0;
  const h = 1e-2;
  for (const t of m.loraTensors as TensorView[]) {
    const g = Float64Array.from(t.grad);
    const gmax = g.reduce((x, v) => Math.max(x, Math.abs(v)), 0);
    expect(gmax, `${t.name} has a nonzero gradient`).toBeGreaterThan(1e-4);
    const idx = [...g.keys()].sort((x, y) => Math.abs(g[y]) - Math.abs(g[x])).slice(0, 2);
    const cands = [...g.keys()].filter((i) => Math.abs(g[i]) > 0.05 * gmax && !idx.includes(i));
    if (cands.length) idx.push(cands[Math.floor(r() * cands.length)]);
    for (const i of idx) {
      const x0 = t.data[i];
      const at = async (d: number) => {
        t.data[i] = x0 + d;
        return lossOf(m, a, e, fw);
      };
      const fd = (8 * ((await at(h)) - (await at(-h))) - ((await at(2 * h)) - (await at(-2 * h)))) / (12 * h);
      t.data[i] = x0;
      worst = Math.max(worst, Math.abs(fd - g[i]) / Math.max(Math.abs(fd), Math.abs(g[i])));
      checked++;
    }
  }
  return { worst, checked };
}

describe('LoRA gradients', () => {
  it('A and B of every target match finite differences', async () => {
    const m = await loraModel(21);
    const { worst, checked } = await finiteDifferences(m, 5, {});
    expect(checked).toBeGreaterThanOrEqual(2 * 2 * 7 * 2);
    expect(worst).toBeLessThan(1e-2);
    m.dispose();
  });

  it('with dropout in a training forward: the backward regenerates the forward masks (finite differences)', async () => {
    const m = await loraModel(22, { dropout: 0.3 });
    const fw = { train: true, dropoutSeed: 1234 };
    const { worst } = await finiteDifferences(m, 6, fw);
    expect(worst).toBeLessThan(1e-2);
    // the masks matter: a training forward differs from an evaluation one, and two seeds differ
    const ev = await m.forward({ tokens, parents });
    const t1 = await m.forward({ tokens, parents }, fw);
    const t2 = await m.forward({ tokens, parents }, { train: true, dropoutSeed: 99 });
    const ev2 = await m.forward({ tokens, parents });
    const diff = (x: Float32Array, y: Float32Array) => x.reduce((s, v, i) => Math.max(s, Math.abs(v - y[i])), 0);
    expect(diff(ev.logp, t1.logp)).toBeGreaterThan(1e-3);
    expect(diff(t1.logp, t2.logp)).toBeGreaterThan(1e-3);
    expect(diff(ev.logp, ev2.logp)).toBe(0); // evaluation is deterministic
    for (const f of [ev, t1, t2, ev2]) f.handle.dispose();
    m.dispose();
  });

  it('equal the full-weight gradient projected onto the adapter: dB = s G A^T, dA = s B^T G', async () => {
    const m = await loraModel(23);
    const { a, e } = coefficients(8);
    await m.zeroGrad();
    const f = await m.forward({ tokens, parents });
    await m.backward(f, a, e);
    f.handle.dispose();
    // the same batch through a full-weight model holding the merged weights W + s B A
    const full = Model.create(CFG, { seed: 23, initStd: 0.25 });
    await full.enableLora({ rank: 3, alpha: 6, targets: ALL });
    full.loraTensors.forEach((t, i) => t.data.set(m.loraTensors[i].data));
    await full.mergeLora();
    await full.zeroGrad();
    const ff = await full.forward({ tokens, parents });
    await full.backward(ff, a, e);
    ff.handle.dispose();
    const s = 6 / 3,
      r = 3;
    let worst = 0;
    for (let l = 0; l < 2; l++)
      for (const t of ALL) {
        const part = ['gate_proj', 'up_proj', 'down_proj'].includes(t) ? 'mlp' : 'self_attn';
        const A = m.tensor(`model.layers.${l}.${part}.${t}.weight`); // base: same name space for shapes
        const [O, I] = A.shape;
        const G = full.tensor(`model.layers.${l}.${part}.${t}.weight`).grad;
        const la = m.loraTensors.find((x) => x.name === `base_model.model.model.layers.${l}.${part}.${t}.lora_A.weight`) as TensorView;
        const lb = m.loraTensors.find((x) => x.name === `base_model.model.model.layers.${l}.${part}.${t}.lora_B.weight`) as TensorView;
        const dB = new Float64Array(O * r),
          dA = new Float64Array(r * I);
        for (let o = 0; o < O; o++)
          for (let k = 0; k < r; k++) for (let i = 0; i < I; i++) dB[o * r + k] += s * G[o * I + i] * la.data[k * I + i];
        for (let k = 0; k < r; k++)
          for (let i = 0; i < I; i++) for (let o = 0; o < O; o++) dA[k * I + i] += s * lb.data[o * r + k] * G[o * I + i];
        const rel = (x: Float32Array, y: Float64Array) => {
          let n = 0,
            d = 0;
          x.forEach((v, i) => ((n += (v - y[i]) ** 2), (d += y[i] ** 2)));
          return Math.sqrt(n / d);
        };
        worst = Math.max(worst, rel(lb.grad, dB), rel(la.grad, dA));
      }
    expect(worst).toBeLessThan(1e-4);
    m.dispose();
    full.dispose();
  });
});

describe('LoRA training', () => {
  it('freezes the base: steps change only the adapters; gradients and AdamW moments exist for the adapters alone', async () => {
    const m = Model.create(CFG, { seed: 31, initStd: 0.1 });
    const full = m.memory();
    await m.enableLora({ rank: 2, alpha: 4, targets: ['q_proj', 'v_proj', 'down_proj'] });
    const base = m.tensors.map((t) => Float32Array.from(t.data));
    const A0 = m.loraTensors.map((t) => Float32Array.from(t.data));
    expect(m.loraTensors.filter((t) => t.name.includes('lora_B')).every((t) => t.data.every((v) => v === 0))).toBe(true);
    const { a } = coefficients(9);
    for (let s = 0; s < 2; s++) {
      await m.zeroGrad();
      const f = await m.forward({ tokens, parents });
      await m.backward(f, a);
      f.handle.dispose();
      await m.clipGradNorm(1);
      await m.step({ lr: 1e-2, weightDecay: 0.1 });
    }
    m.tensors.forEach((t, i) =>
      expect(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength).equals(Buffer.from(base[i].buffer)), t.name).toBe(true),
    );
    expect(m.loraTensors.every((t, i) => t.data.some((v, k) => v !== A0[i][k]))).toBe(true);
    const mem = m.memory();
    expect(mem.adapterParams).toBe(2 * (2 * (16 + 16) + 2 * (16 + 8) + 2 * (24 + 16)));
    expect(mem.trainableParams).toBe(mem.adapterParams);
    expect(mem.gradBytes).toBe(4 * mem.adapterParams);
    expect(mem.optimizerBytes).toBe(8 * mem.adapterParams);
    expect(mem.paramBytes).toBe(full.paramBytes + 4 * mem.adapterParams);
    expect(m.stepCount).toBe(2);
    expect(m.optimizerState().m?.length).toBe(mem.adapterParams);
    expect(() => m.tensors[0].grad).toThrow(/frozen/);
    m.dispose();
  });

  it("returns the base gradients' memory at once, though JavaScript views of them are still unreclaimed", async () => {
    const m = Model.create(
      { ...CFG, vocabSize: 4096, hiddenSize: 1024, numHiddenLayers: 1, numAttentionHeads: 8, numKeyValueHeads: 4 },
      { seed: 3 },
    );
    await m.zeroGrad(); // touch every page of the gradient arena
    const gradBytes = m.memory().gradBytes;
    expect(gradBytes).toBeGreaterThan(24 * 2 ** 20);
    const before = process.memoryUsage().rss;
    await m.enableLora({ rank: 4, alpha: 8, targets: ['q_proj'] });
    const after = process.memoryUsage().rss;
    expect(before - after).toBeGreaterThan(gradBytes / 2);
    m.dispose();
  });

  it("merged weights give the adapter model's log-probs and entropies; save() writes them merged", async () => {
    const m = await loraModel(41);
    const f = await m.forward({ tokens, parents });
    const dir = `${process.env.TMPDIR ?? '/tmp'}/anvil-lora-merged-${process.pid}`;
    await m.save(dir);
    const saved = await Model.load(dir);
    const fs = await saved.forward({ tokens, parents });
    const before = m.tensors.map((t) => Float32Array.from(t.data));
    await m.mergeLora();
    expect(m.lora).toBeNull();
    expect(m.tensors.some((t, i) => t.data.some((v, k) => v !== before[i][k]))).toBe(true);
    const fm = await m.forward({ tokens, parents });
    for (let i = 0; i < tokens.length; i++) {
      expect(Math.abs(fm.logp[i] - f.logp[i])).toBeLessThan(2e-5);
      expect(Math.abs(fm.entropy[i] - f.entropy[i])).toBeLessThan(2e-5);
      expect(fs.logp[i]).toBe(fm.logp[i]); // save() merged exactly as mergeLora does
    }
    // merged, the base is trainable again
    expect(m.memory().gradBytes).toBe(4 * m.numParams);
    expect(m.tensors[0].grad.length).toBe(m.tensors[0].numel);
    saved.dispose();
    m.dispose();
  });

  it('generation applies unmerged adapters: sampled log-probs equal the training forward', async () => {
    const m = await loraModel(42);
    const gen = await createGenerator(m, { prefixCacheBytes: 0 });
    const prompt = [1, 2, 3, 4];
    const g = await gen.generate(prompt, { maxTokens: 6, temperature: 1, seed: 3 });
    await gen.close();
    const seq = [...prompt, ...g.outputIds];
    const f = await m.forward({ tokens: Int32Array.from(seq), parents: Int32Array.from(seq, (_, i) => i - 1) });
    g.logprobs.forEach((lp, i) => expect(Math.abs(lp - f.logp[prompt.length + i])).toBeLessThan(1e-4));
    // and they differ from the base model's
    await m.disableLora();
    const fb = await m.forward({ tokens: Int32Array.from(seq), parents: Int32Array.from(seq, (_, i) => i - 1) });
    expect(g.logprobs.some((lp, i) => Math.abs(lp - fb.logp[prompt.length + i]) > 1e-3)).toBe(true);
    m.dispose();
  });
});

describe('LoRA bad input', () => {
  const bad: Array<[string, Partial<LoraOptions>, RegExp]> = [
    ['a module the model lacks', { targets: ['q_proj', 'c_attn'] }, /no module named "c_attn"/],
    ['no targets', { targets: [] }, /targets must be a non-empty array/],
    ['rank 0', { rank: 0 }, /rank 0 is out of range for q_proj/],
    [
      'rank above min(in, out)',
      { rank: 9, targets: ['k_proj'] },
      /rank 9 is out of range for k_proj \(16 -> 8 features\): it must be in \[1, 8\]/,
    ],
    ['a fractional rank', { rank: 2.5 }, /rank must be an integer/],
    ['alpha 0', { alpha: 0 }, /alpha must be a finite number > 0/],
    ['alpha NaN', { alpha: NaN }, /alpha must be a finite number > 0/],
    ['dropout 1', { dropout: 1 }, /dropout must be in \[0, 1\)/],
    ['negative dropout', { dropout: -0.1 }, /dropout must be in \[0, 1\)/],
  ];
  for (const [what, o, re] of bad)
    it(`refuses ${what}, changing nothing`, async () => {
      const m = Model.create(CFG, { seed: 51 });
      const f0 = await m.forward({ tokens, parents });
      await expect(m.enableLora({ rank: 2, alpha: 4, targets: ['q_proj'], ...o })).rejects.toThrow(LoraConfigError);
      await expect(m.enableLora({ rank: 2, alpha: 4, targets: ['q_proj'], ...o })).rejects.toThrow(re);
      expect(m.lora).toBeNull();
      expect(m.loraTensors).toHaveLength(0);
      expect(m.memory().gradBytes).toBe(4 * m.numParams);
      const f1 = await m.forward({ tokens, parents });
      expect(f1.logp).toEqual(f0.logp);
      m.dispose();
    });

  it('the native binding refuses the same configs itself (a caller that skips the TypeScript checks)', async () => {
    const m = Model.create(CFG, { seed: 52 });
    const nat = m.nat();
    expect(() => nat.enableLora({ rank: 2, alpha: 1, dropout: 0, targets: ['lm_head'], seed: 0 })).toThrow(/no module named "lm_head"/);
    expect(() => nat.enableLora({ rank: 17, alpha: 1, dropout: 0, targets: ['q_proj'], seed: 0 })).toThrow(/out of range/);
    expect(() => nat.enableLora({ rank: 2, alpha: -1, dropout: 0, targets: ['q_proj'], seed: 0 })).toThrow(/alpha/);
    expect(() => nat.enableLora({ rank: 2, alpha: 1, dropout: 1.5, targets: ['q_proj'], seed: 0 })).toThrow(/dropout/);
    expect(nat.loraConfig()).toBeNull();
    m.dispose();
  });

  it('a forward from before the adapters changed cannot be backpropagated', async () => {
    const m = Model.create(CFG, { seed: 53 });
    const f = await m.forward({ tokens, parents });
    await m.enableLora({ rank: 2, alpha: 4, targets: ['q_proj'] });
    await expect(m.backward(f, new Float32Array(tokens.length))).rejects.toThrow(/enabled, replaced or merged after this forward/);
    const g = await m.forward({ tokens, parents });
    await m.enableLora({ rank: 2, alpha: 4, targets: ['v_proj'] });
    await expect(m.backward(g, new Float32Array(tokens.length))).rejects.toThrow(/after this forward/);
    await expect(m.forward({ tokens, parents }, { dropoutSeed: -1 })).rejects.toThrow(/dropoutSeed/);
    m.dispose();
  });
});
