// Tied input/output embeddings (SmolLM2, Qwen2-0.5B): one matrix serves as the embedding table and
// the LM head, so its gradient is the sum of both uses; it is one tensor for AdamW and in the file.
import { mkdtempSync, promises as fsp } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Model, ModelConfigInput, parseSafetensors } from './index';
import { randn, rng } from './test-support';

const BASE: ModelConfigInput = {
  vocabSize: 24,
  hiddenSize: 18, // 9 query heads of 2 over 3 KV heads: SmolLM2's head grouping
  intermediateSize: 20,
  numHiddenLayers: 2,
  numAttentionHeads: 9,
  numKeyValueHeads: 3,
  ropeTheta: 100000,
  rmsNormEps: 1e-5,
};
const tokens = new Int32Array([3, 7, 1, 9, 4, 4, 2, 8, 5, 0, 6, 11, 23]);
const parents = new Int32Array([-1, 0, 1, 2, 2, 1, 5, 5, 7, -1, 9, 10, 10]);

describe('tied embeddings', () => {
  it('the gradient of the tied matrix is the embedding part plus the LM-head part', async () => {
    const tied = Model.create({ ...BASE, tieWordEmbeddings: true }, { seed: 3, initStd: 0.3 });
    const untied = Model.create({ ...BASE, tieWordEmbeddings: false }, { seed: 3, initStd: 0.3 });
    expect(tied.tensors.some((t) => t.name === 'lm_head.weight')).toBe(false);
    for (const t of tied.tensors) untied.tensor(t.name).data.set(t.data);
    untied.tensor('lm_head.weight').data.set(tied.tensor('model.embed_tokens.weight').data);
    const r = rng(4);
    const a = Float32Array.from(parents, (p) => (p < 0 ? 0 : randn(r)));
    const e = Float32Array.from(parents, (p) => (p < 0 ? 0 : 0.3 * randn(r)));
    const run = async (m: Model) => {
      await m.zeroGrad();
      const f = await m.forward({ tokens, parents });
      await m.backward(f, a, e);
      f.handle.dispose();
      return f.logp;
    };
    const lt = await run(tied),
      lu = await run(untied);
    expect(lt).toEqual(lu);
    const g = tied.tensor('model.embed_tokens.weight').grad;
    const ge = untied.tensor('model.embed_tokens.weight').grad,
      gl = untied.tensor('lm_head.weight').grad;
    let worst = 0,
      norm = 0;
    g.forEach((v, i) => {
      worst = Math.max(worst, Math.abs(v - (ge[i] + gl[i])));
      norm = Math.max(norm, Math.abs(v));
    });
    expect(worst).toBeLessThan(1e-6 * Math.max(norm, 1));
    // both parts are really there: rows of tokens never input still get the LM head's gradient
    const C = BASE.hiddenSize,
      unused = 22; // not in `tokens`
    expect(ge.subarray(unused * C, (unused + 1) * C).every((v) => v === 0)).toBe(true);
    expect(g.subarray(unused * C, (unused + 1) * C).some((v) => v !== 0)).toBe(true);
    // every other tensor's gradient is the same in both models
    for (const t of tied.tensors)
      if (t.name !== 'model.embed_tokens.weight')
        t.grad.forEach((v, i) => expect(Math.abs(v - untied.tensor(t.name).grad[i])).toBeLessThanOrEqual(1e-6 + 1e-5 * Math.abs(v)));
    tied.dispose();
    untied.dispose();
  });

  it('AdamW keeps one set of moments for the shared matrix, and the file holds it once', async () => {
    const m = Model.create({ ...BASE, tieWordEmbeddings: true }, { seed: 5, initStd: 0.2 });
    await m.zeroGrad();
    const f = await m.forward({ tokens, parents });
    await m.backward(
      f,
      Float32Array.from(parents, (p) => (p < 0 ? 0 : -1)),
    );
    f.handle.dispose();
    await m.step({ lr: 1e-2 });
    expect(m.memory().optimizerBytes).toBe(8 * m.numParams);
    expect(m.optimizerState().m?.length).toBe(m.numParams);
    const dir = mkdtempSync(join(tmpdir(), 'anvil-tied-'));
    try {
      await m.save(dir);
      const st = parseSafetensors(await fsp.readFile(join(dir, 'model.safetensors')));
      expect(st.tensors.has('lm_head.weight')).toBe(false);
      expect(JSON.parse(await fsp.readFile(join(dir, 'config.json'), 'utf8')).tie_word_embeddings).toBe(true);
      const back = await Model.load(dir);
      const a = await m.forward({ tokens, parents }),
        b = await back.forward({ tokens, parents });
      expect(b.logp).toEqual(a.logp);
      back.dispose();
    } finally {
      await fsp.rm(dir, { recursive: true, force: true });
    }
    m.dispose();
  });
});
