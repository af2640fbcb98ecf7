// AdamW against its closed form (Float64, in TypeScript), gradient clipping and accumulation.
import { describe, expect, it } from 'vitest';
import { Model } from './index';
import { randn, rng } from './test-support';

const cfg = {
  vocabSize: 32,
  hiddenSize: 16,
  intermediateSize: 24,
  numHiddenLayers: 1,
  numAttentionHeads: 2,
  numKeyValueHeads: 1,
  attentionBias: true,
};

describe('AdamW', () => {
  it('matches the closed form over several steps (bias correction, decoupled decay, no decay on 1-D)', async () => {
    const r = rng(5);
    const model = Model.create(cfg, { seed: 1, initStd: 0.1 });
    const beta1 = 0.9,
      beta2 = 0.95,
      eps = 1e-6,
      wd = 0.1;
    model.configureOptimizer({ beta1, beta2, eps, weightDecay: wd });
    const ref = model.tensors.map((t) => ({
      p: Float64Array.from(t.data),
      m: new Float64Array(t.numel),
      v: new Float64Array(t.numel),
      decay: t.shape.length >= 2,
    }));
    expect(model.tensors.filter((t) => t.decay).every((t) => t.shape.length === 2)).toBe(true);
    expect(model.tensor('model.norm.weight').decay).toBe(false);
    expect(model.tensor('model.layers.0.self_attn.q_proj.bias').decay).toBe(false);
    const lrs = [1e-2, 5e-3, 2e-2, 1e-3, 1e-2];
    for (let step = 1; step <= lrs.length; step++) {
      await model.zeroGrad();
      const lr = lrs[step - 1];
      model.tensors.forEach((t) => t.grad.forEach((_, i) => (t.grad[i] = randn(r) * (i % 3 === 0 ? 1e-3 : 1))));
      expect(await model.step({ lr })).toBe(step);
      model.tensors.forEach((t, k) => {
        const s = ref[k];
        const wdk = s.decay ? wd : 0;
        for (let i = 0; i < t.numel; i++) {
          const g = t.grad[i];
          s.m[i] = beta1 * s.m[i] + (1 - beta1) * g;
          s.v[i] = beta2 * s.v[i] + (1 - beta2) * g * g;
          const mhat = s.m[i] / (1 - beta1 ** step),
            vhat = s.v[i] / (1 - beta2 ** step);
          s.p[i] = s.p[i] - lr * wdk * s.p[i] - (lr * mhat) / (Math.sqrt(vhat) + eps);
        }
        let worst = 0;
        for (let i = 0; i < t.numel; i++) worst = Math.max(worst, Math.abs(t.data[i] - s.p[i]) / (1e-6 + Math.abs(s.p[i])));
        expect(worst, `${t.name} step ${step}`).toBeLessThan(1e-4);
      });
    }
    expect(model.memory().optimizerBytes).toBe(2 * model.memory().paramBytes);
  });

  it('decay rule and hyper-parameters are configurable per step', async () => {
    const model = Model.create(cfg, { seed: 2 });
    model.configureOptimizer({ decay: () => true, weightDecay: 0.5 });
    await model.zeroGrad();
    const w = model.tensor('model.norm.weight');
    const before = w.data[0];
    await model.step({ lr: 0.1 }); // zero gradient: only decay moves the weight
    expect(w.data[0]).toBeCloseTo(before * (1 - 0.1 * 0.5), 6);
    await model.step({ lr: 0.1, weightDecay: 0 });
    expect(w.data[0]).toBeCloseTo(before * (1 - 0.1 * 0.5), 6);
  });
});

describe('gradient accumulation and clipping', () => {
  it('accumulating two packs equals one pack holding both; zeroGrad resets', async () => {
    const model = Model.create(cfg, { seed: 3, initStd: 0.2 });
    const a = { tokens: new Int32Array([1, 2, 3, 4]), parents: new Int32Array([-1, 0, 1, 1]) };
    const b = { tokens: new Int32Array([5, 6, 7]), parents: new Int32Array([-1, 0, 1]) };
    const both = { tokens: new Int32Array([1, 2, 3, 4, 5, 6, 7]), parents: new Int32Array([-1, 0, 1, 1, -1, 4, 5]) };
    const ca = new Float32Array([0, 1, -0.5, 2]),
      cb = new Float32Array([0, 0.7, 1.3]);
    await model.zeroGrad();
    for (const [p, c] of [
      [a, ca],
      [b, cb],
    ] as const) {
      const fw = await model.forward(p);
      await model.backward(fw, c);
      fw.handle.dispose();
    }
    const acc = model.tensors.map((t) => Float64Array.from(t.grad));
    await model.zeroGrad();
    expect(await model.gradNorm()).toBe(0);
    const fw = await model.forward(both);
    await model.backward(fw, new Float32Array([...ca, ...cb]));
    model.tensors.forEach((t, k) => {
      let d = 0,
        n = 0;
      t.grad.forEach((g, i) => ((d += (g - acc[k][i]) ** 2), (n += g * g)));
      expect(Math.sqrt(d), t.name).toBeLessThanOrEqual(1e-5 * Math.sqrt(n) + 1e-12);
    });
  });

  it('kept and recomputed LM-head logits give the same gradients; a handle can be backpropagated twice', async () => {
    const model = Model.create({ ...cfg, vocabSize: 300 }, { seed: 6, initStd: 0.2 });
    const pack = { tokens: new Int32Array([1, 2, 3, 4, 5, 6]), parents: new Int32Array([-1, 0, 1, 1, 3, -1]) };
    const coef = new Float32Array([0, 0.5, -1, 2, 1, 0]),
      ent = new Float32Array([0, 0.1, 0, -0.3, 0.2, 0]);
    const grads: Float64Array[][] = [];
    for (const logits of ['keep', 'recompute'] as const) {
      await model.zeroGrad();
      const fw = await model.forward(pack, { logits });
      await model.backward(fw, coef, ent);
      await model.backward(fw, coef, ent); // twice: the kept logits must survive the first backward
      grads.push(model.tensors.map((t) => Float64Array.from(t.grad)));
      fw.handle.dispose();
    }
    model.tensors.forEach((t, k) => {
      let d = 0,
        n = 0;
      grads[0][k].forEach((g, i) => ((d += (g - grads[1][k][i]) ** 2), (n += g * g)));
      expect(Math.sqrt(d), t.name).toBeLessThanOrEqual(1e-5 * Math.sqrt(n) + 1e-12);
    });
    const keep = await model.forward(pack, { logits: 'keep' });
    const rec = await model.forward(pack, { logits: 'recompute' });
    expect(keep.handle.activationBytes).toBeGreaterThan(rec.handle.activationBytes); // the [M, V] logits
  });

  it('clipGradNorm returns the pre-clip norm and scales to maxNorm', async () => {
    const model = Model.create(cfg, { seed: 4, initStd: 0.2 });
    await model.zeroGrad();
    const fw = await model.forward({ tokens: new Int32Array([1, 2, 3]), parents: new Int32Array([-1, 0, 1]) });
    await model.backward(fw, new Float32Array([0, 3, 3]));
    let sq = 0;
    for (const t of model.tensors) for (const g of t.grad) sq += g * g;
    const norm = await model.clipGradNorm(0.5);
    expect(norm).toBeCloseTo(Math.sqrt(sq), 4);
    expect(norm).toBeGreaterThan(0.5);
    expect(await model.gradNorm()).toBeCloseTo(0.5, 4);
    expect(await model.clipGradNorm(10)).toBeCloseTo(0.5, 4); // under the limit: unchanged
    expect(await model.gradNorm()).toBeCloseTo(0.5, 4);
  });
});
