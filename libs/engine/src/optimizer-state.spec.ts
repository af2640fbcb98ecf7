import { describe, expect, it } from 'vitest';
import { CHECK_CONFIGS, optimizerStateResumes } from './cuda-checks';
import { Model } from './model';

async function oneStep(m: Model, seed: number) {
  const tokens = Int32Array.from({ length: 12 }, (_, i) => (i * 7 + seed) % 200);
  const parents = Int32Array.from({ length: 12 }, (_, i) => i - 1);
  const res = await m.forward({ tokens, parents });
  const d = new Float32Array(12).fill(-0.1);
  d[0] = 0;
  await m.zeroGrad();
  await m.backward(res.handle, d);
  res.handle.dispose();
  await m.step({ lr: 1e-2 });
}

describe('optimizer state', () => {
  it('is null before the first step and restores AdamW exactly: resumed training equals uninterrupted training bit for bit', async () => {
    const a = Model.tiny({ seed: 3, config: { vocabSize: 272 } });
    expect(a.optimizerState()).toEqual({ step: 0, m: null, v: null });
    await oneStep(a, 1);
    await oneStep(a, 2);
    const state = a.optimizerState();
    expect(state.step).toBe(2);
    expect(state.m?.length).toBe(a.numParams);
    const b = Model.tiny({ seed: 99, config: { vocabSize: 272 } });
    b.tensors.forEach((t, i) => t.data.set(a.tensors[i].data));
    b.setOptimizerState({ step: state.step, m: state.m as Float32Array, v: state.v as Float32Array });
    await oneStep(a, 3);
    await oneStep(b, 3);
    expect(b.stepCount).toBe(3);
    a.tensors.forEach((t, i) =>
      expect(
        Buffer.from(b.tensors[i].data.buffer, b.tensors[i].data.byteOffset, b.tensors[i].data.byteLength).equals(
          Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength),
        ),
      ).toBe(true),
    );
    a.dispose();
    b.dispose();
  });

  it('refuses moments of the wrong size and a bad step', () => {
    const m = Model.tiny({ seed: 1, config: { vocabSize: 272 } });
    expect(() => m.setOptimizerState({ step: 1, m: new Float32Array(3), v: new Float32Array(3) })).toThrow(/one entry per parameter/);
    const n = m.numParams;
    expect(() => m.setOptimizerState({ step: -1, m: new Float32Array(n), v: new Float32Array(n) })).toThrow(/step must be an integer/);
    m.dispose();
  });
});

describe('the optimizer-state device check (cuda-checks.ts), run on the CPU backend', () => {
  it('passes there with a bitwise resume and sees that zero moments land elsewhere', async () => {
    const c = await optimizerStateResumes(CHECK_CONFIGS[0].cfg, 'cpu');
    expect(c.detail).toMatch(/round-trip bitwise/);
    expect(c.metrics.bitwise).toBe(1);
    expect(c.metrics.zeroMomentsMaxAbsGap).toBeGreaterThan(1e-5);
    expect(c.passed).toBe(true);
  });
});
