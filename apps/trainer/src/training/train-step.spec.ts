import { describe, expect, it } from 'vitest';
import { Model } from '@anvil/engine';
import { computeLoss, flatPack, lossConfig, prefixTreeOf, seededRandom, type LossConfig } from '@anvil/rl';
import { lossAndGradients, lrAt, miniBatchesOf, trainOnTree } from './train-step';

/** Two groups of multi-turn trajectories over a 272-token vocabulary: calls extend each other, so the tree shares a lot. */
function batch(seed: number) {
  const rand = seededRandom(seed);
  const tok = () => Math.floor(rand() * 250);
  const system = Array.from({ length: 10 }, tok);
  const samples = [];
  for (let g = 0; g < 2; g++) {
    const task = [...system, ...Array.from({ length: 4 }, tok)];
    for (let r = 0; r < 3; r++) {
      let ctx = [...task];
      const advantage = rand() * 2 - 1;
      for (let c = 0; c < 3; c++) {
        const outputIds = Array.from({ length: 2 + Math.floor(rand() * 4) }, tok);
        samples.push({
          sampleId: `g${g}r${r}c${c}`,
          trajectoryId: `g${g}r${r}`,
          groupId: `g${g}`,
          advantage,
          lossWeight: r === 2 && g === 1 ? 0 : 1,
          promptIds: [...ctx],
          outputIds,
          behaviourLogp: outputIds.map(() => -5.6 + (rand() - 0.5)),
          versions: outputIds.map(() => (c === 0 ? 3 : 4)),
        });
        ctx = [...ctx, ...outputIds, ...Array.from({ length: 3 }, tok)];
      }
    }
  }
  return samples;
}

const model = () => Model.tiny({ seed: 5, config: { vocabSize: 272 } });

async function unmergedGradients(m: Model, samples: ReturnType<typeof batch>, cfg: LossConfig, reference?: Model) {
  const pack = flatPack(samples.map((s) => ({ promptIds: s.promptIds, outputIds: s.outputIds })));
  const res = await m.forward(pack);
  const refRes = reference ? await reference.forward(pack) : null;
  refRes?.handle.dispose();
  const lossSamples = samples.map((s, k) => ({
    logp: Float32Array.from(pack.outputNodes[k], (j) => res.logp[j]),
    behaviourLogp: Float32Array.from(s.behaviourLogp),
    versions: Uint32Array.from(s.versions),
    advantage: s.advantage,
    weight: s.lossWeight,
    trajectoryId: s.trajectoryId,
    groupId: s.groupId,
    // decoupled PPO 'recomputed': π_prox is the weights before the step, the ones this forward ran
    ...(cfg.kind === 'decoupled_ppo' && cfg.prox?.mode === 'recomputed'
      ? { proxLogp: Float32Array.from(pack.outputNodes[k], (j) => res.logp[j]) }
      : {}),
    ...(refRes ? { refLogp: Float32Array.from(pack.outputNodes[k], (j) => refRes.logp[j]) } : {}),
  }));
  const result = computeLoss(lossSamples, cfg);
  const coeff = new Float32Array(pack.tokens.length);
  pack.outputNodes.forEach((nodes, k) => nodes.forEach((j, t) => (coeff[j] += result.dLdlogp[k][t])));
  await m.zeroGrad();
  await m.backward(res.handle, coeff);
  res.handle.dispose();
  return { loss: result.loss, grads: m.tensors.map((t) => Float32Array.from(t.grad)) };
}

describe('trainer loss wiring', () => {
  const samples = batch(11);
  const tree = prefixTreeOf(samples);
  for (const cfg of [
    lossConfig(),
    lossConfig({ kind: 'ppo' }),
    lossConfig({ aggregation: 'trajectory' }),
    lossConfig({ aggregation: 'group', correction: { geoMask: { low: 0.5, high: 2 } }, kind: 'ppo' }),
    lossConfig({ kind: 'decoupled_ppo', correction: { tokenTis: { cap: 2 } } }),
    lossConfig({ kind: 'reinforce_tis', aggregation: 'seq_mean_token_mean' }),
    lossConfig({ klCoef: 0.2 }),
  ]) {
    it(`${cfg.kind}/${cfg.aggregation}${cfg.klCoef ? ' + KL to a reference' : ''}: merged-tree gradients equal unmerged training, the loss equals libs/rl's on unmerged log-probs`, async () => {
      const m = model();
      // a reference that differs from the trained weights, so the penalty's gradient is not zero
      const reference = cfg.klCoef ? Model.tiny({ seed: 6, config: { vocabSize: 272 } }) : undefined;
      const ref = await unmergedGradients(m, samples, cfg, reference);
      for (const budget of [100_000, 60]) {
        const g = await lossAndGradients(
          m,
          tree,
          samples.map((_, k) => k),
          { loss: cfg, packTokens: budget },
          { currentVersion: 4, ...(reference ? { reference } : {}) },
        );
        expect(g.finite).toBe(true);
        if (reference) expect(g.stats?.klRefK3).toBeGreaterThan(0.01);
        expect(g.loss).toBeCloseTo(ref.loss, 5);
        if (budget === 100_000) {
          expect(g.packs).toBe(1);
          expect(g.sharing).toBeGreaterThan(0.4);
        } else expect(g.packs).toBeGreaterThan(1);
        m.tensors.forEach((t, i) => {
          const r = ref.grads[i];
          let maxAbs = 0,
            maxRef = 0;
          for (let j = 0; j < r.length; j++) {
            maxAbs = Math.max(maxAbs, Math.abs(t.grad[j] - r[j]));
            maxRef = Math.max(maxRef, Math.abs(r[j]));
          }
          expect(maxAbs).toBeLessThanOrEqual(1e-5 * Math.max(1, maxRef));
        });
      }
      m.dispose();
      reference?.dispose();
    });
  }

  it('a KL penalty without a reference model is refused before any forward', async () => {
    const m = model();
    await expect(
      lossAndGradients(m, tree, [0, 1], { loss: lossConfig({ klCoef: 0.1 }), packTokens: 100_000 }, { currentVersion: 4 }),
    ).rejects.toThrow(/klCoef is 0.1 but the trainer has no reference model/);
    m.dispose();
  });

  it('measures the mismatch only on tokens the current version generated, and splits it', async () => {
    const m = model();
    const g = await lossAndGradients(
      m,
      tree,
      samples.map((_, k) => k),
      { loss: lossConfig(), packTokens: 100_000 },
      { currentVersion: 4, splitOf: (k) => (k % 2 ? 'odd' : 'even') },
    );
    const current = samples.reduce((a, s) => a + s.versions.filter((v) => v === 4).length, 0);
    expect(g.mismatch.all.tokens).toBe(current);
    expect(g.mismatch.splits.map((s) => s.key).sort()).toEqual(['even', 'odd']);
    expect(g.mismatch.splits.reduce((a, s) => a + s.tokens, 0)).toBe(current);
    m.dispose();
  });

  it('mini-batches split along groups and each takes one optimizer step; a non-finite advantage never reaches the weights', async () => {
    expect(miniBatchesOf(tree, 2).map((m) => new Set(m.map((k) => tree.samples[k].groupId)).size)).toEqual([1, 1]);
    const m = model();
    const before = Float32Array.from(m.tensors[0].data);
    const reports = await trainOnTree(
      m,
      tree,
      { loss: lossConfig(), lr: 1e-3, maxGradNorm: 1, packTokens: 100_000, miniBatches: 2 },
      { currentVersion: 4 },
    );
    expect(reports.map((r) => r.skipped)).toEqual([null, null]);
    expect(m.stepCount).toBe(2);
    expect(m.tensors[0].data.some((v, i) => v !== before[i])).toBe(true);
    const bad = { ...tree, samples: tree.samples.map((s, k) => (k === 0 ? { ...s, advantage: Number.NaN } : s)) };
    await expect(
      trainOnTree(m, bad, { loss: lossConfig(), lr: 1e-3, maxGradNorm: 1, packTokens: 100_000, miniBatches: 1 }, { currentVersion: 4 }),
    ).rejects.toThrow(/advantage/);
    expect(m.stepCount).toBe(2);
    m.dispose();
  });

  it("measures the mismatch only on mini-batches trained on the current version's weights (before the batch's first applied step)", async () => {
    const parts = miniBatchesOf(tree, 2);
    const currentIn = (members: number[]) => members.reduce((a, k) => a + samples[k].versions.filter((v) => v === 4).length, 0);
    expect(parts.every((p) => currentIn(p) > 0)).toBe(true);
    const m = model();
    const reports = await trainOnTree(
      m,
      tree,
      { loss: lossConfig(), lr: 1e-3, maxGradNorm: 1, packTokens: 100_000, miniBatches: 2 },
      { currentVersion: 4 },
    );
    expect(reports.map((r) => r.mismatch.tokens)).toEqual([currentIn(parts[0]), 0]);
    expect(reports[1].mismatchBySplit).toEqual([]);
    m.dispose();
  });

  it('trainOnTree takes the same steps as forward + loss + backward, clip and AdamW per mini-batch: the weights are equal bit for bit', async () => {
    const settings = { loss: lossConfig(), lr: 1e-2, maxGradNorm: 1, packTokens: 100_000, miniBatches: 2 };
    const a = model();
    await trainOnTree(a, tree, settings, { currentVersion: 4 });
    const b = model();
    for (const [i, part] of miniBatchesOf(tree, 2).entries()) {
      await lossAndGradients(b, tree, part, settings, { currentVersion: 4 });
      await b.clipGradNorm(1);
      await b.step({ lr: lrAt(settings, i + 1) });
    }
    a.tensors.forEach((t, i) => expect(Array.from(t.data)).toEqual(Array.from(b.tensors[i].data)));
    a.dispose();
    b.dispose();
  });

  it('non-finite log-probs (weights gone NaN) skip the step like a non-finite loss: nothing is applied, nothing throws', async () => {
    const m = model();
    m.tensors[0].data.fill(Number.NaN);
    await m.syncToDevice();
    const reports = await trainOnTree(
      m,
      tree,
      { loss: lossConfig(), lr: 1e-3, maxGradNorm: 1, packTokens: 100_000, miniBatches: 2 },
      { currentVersion: 4 },
    );
    expect(reports.map((r) => r.skipped)).toEqual(['non-finite log-probs', 'non-finite log-probs']);
    expect(m.stepCount).toBe(0);
    m.dispose();
  });

  it('warm-up: step t of the run takes lr · min(1, t / warmupSteps), counted from stepsDone (so a resumed run continues the ramp)', async () => {
    expect([1, 2, 5, 10, 11].map((t) => lrAt({ lr: 1e-3, warmupSteps: 10 }, t))).toEqual(
      [1e-4, 2e-4, 5e-4, 1e-3, 1e-3].map((v) => expect.closeTo(v, 12)),
    );
    expect(lrAt({ lr: 1e-3 }, 1)).toBe(1e-3);
    // cosine decay after the warm-up: peak at the end of the warm-up, half way down at the middle, the floor from decaySteps on
    const cos = { lr: 1e-3, warmupSteps: 10, decaySteps: 110, minLrFactor: 0.1 };
    expect([5, 10, 60, 110, 500].map((t) => lrAt(cos, t))).toEqual([5e-4, 1e-3, 5.5e-4, 1e-4, 1e-4].map((v) => expect.closeTo(v, 12)));
    expect(lrAt({ lr: 1e-3, decaySteps: 100 }, 100)).toBeCloseTo(1e-4, 12);
    expect(lrAt({ lr: 1e-3, warmupSteps: 10, decaySteps: 10 }, 50)).toBe(1e-3); // no room to decay: constant
    const m = model();
    const reports = await trainOnTree(
      m,
      tree,
      { loss: lossConfig(), lr: 1e-3, warmupSteps: 4, maxGradNorm: 1, packTokens: 100_000, miniBatches: 2 },
      { currentVersion: 4, stepsDone: 1 },
    );
    expect(reports.map((r) => r.lr)).toEqual([expect.closeTo(5e-4, 12), expect.closeTo(7.5e-4, 12)]);
    m.dispose();
  });
});
