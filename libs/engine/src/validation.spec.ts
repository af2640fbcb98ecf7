// Every invalid input is a JavaScript error with a specific message, and the process stays alive.
import { describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Model, analyzeTree, selectEngine, ConfigError, parseHfConfig, findRepoRoot } from './index';

const model = Model.create(
  { vocabSize: 50, hiddenSize: 16, intermediateSize: 24, numHiddenLayers: 1, numAttentionHeads: 2, numKeyValueHeads: 1 },
  { seed: 1 },
);
const i32 = (a: number[]) => Int32Array.from(a);
const ok = { tokens: i32([1, 2, 3]), parents: i32([-1, 0, 1]) };

describe('invalid packs are rejected, never a crash', () => {
  const cases: Array<[string, number[], number[], RegExp]> = [
    ['empty pack', [], [], /empty pack/],
    ['self-cycle', [1, 2], [-1, 1], /cycle: node 1 is its own parent/],
    ['two-node cycle (parent after child)', [1, 2], [1, 0], /parents\[0\] = 1.*must precede.*cycles/],
    ['parent index >= child index', [1, 2, 3], [-1, 2, 0], /parent index >= child index: parents\[1\] = 2/],
    ['parent out of range (too large)', [1, 2], [-1, 7], /parent index out of range: parents\[1\] = 7 but the pack has 2 nodes/],
    ['parent out of range (negative)', [1, 2], [-1, -3], /parent index out of range: parents\[1\] = -3/],
    ['token >= vocab', [1, 50], [-1, 0], /token out of range: tokens\[1\] = 50 \(vocab size 50\)/],
    ['negative token', [-4, 1], [-1, 0], /token out of range: tokens\[0\] = -4/],
    ['length mismatch', [1, 2, 3], [-1, 0], /same length/],
  ];
  for (const [label, tokens, parents, re] of cases)
    it(label, async () => {
      await expect(model.forward({ tokens: i32(tokens), parents: i32(parents) })).rejects.toThrow(re);
    });

  it('analyzeTree validates the same way (synchronously)', () => {
    expect(() => analyzeTree(i32([0]))).toThrow(/cycle/);
    expect(() => analyzeTree(i32([]))).toThrow(/empty pack/);
  });

  it('wrong array types', async () => {
    await expect(model.forward({ tokens: [1, 2] as unknown as Int32Array, parents: i32([-1, 0]) })).rejects.toThrow(/Int32Array/);
    await expect(model.forward({ tokens: i32([1, 2]), parents: new Float32Array([-1, 0]) as unknown as Int32Array })).rejects.toThrow(
      /Int32Array/,
    );
  });

  it('memory limits are enforced before allocating', async () => {
    await expect(model.forward(ok, { maxTokens: 2 })).rejects.toThrow(/pack has 3 tokens, over the limit maxTokens = 2/);
    await expect(model.forward(ok, { maxBytes: 1000 })).rejects.toThrow(/bytes of activations and scratch, over the limit maxBytes = 1000/);
    const fw = await model.forward(ok, { maxTokens: 3, maxBytes: 1e9 });
    expect(fw.handle.activationBytes).toBeGreaterThan(0);
    expect(fw.handle.peakBytes).toBeLessThan(1e9);
    fw.handle.dispose();
  });

  it('bad backward coefficients: NaN/Inf, nonzero on a root, wrong length, disposed handle', async () => {
    const fw = await model.forward(ok);
    await expect(model.backward(fw, new Float32Array([0, NaN, 1]))).rejects.toThrow(/non-finite loss coefficient \(NaN or Inf\) at node 1/);
    await expect(model.backward(fw, new Float32Array([0, 1, 1]), new Float32Array([0, 0, Infinity]))).rejects.toThrow(/non-finite.*node 2/);
    await expect(model.backward(fw, new Float32Array([1, 1, 1]))).rejects.toThrow(/node 0 is a root: it has no prediction/);
    await expect(model.backward(fw, new Float32Array([0, 1]))).rejects.toThrow(/dLdlogp has length 2 but the pack has 3 nodes/);
    await expect(model.backward(fw, new Float32Array([0, 1, 1]), new Float32Array(2))).rejects.toThrow(/dLdEntropy has length 2/);
    const other = Model.create(model.config, { seed: 2 });
    await expect(other.backward(fw, new Float32Array(3))).rejects.toThrow(/another model/);
    fw.handle.dispose();
    expect(fw.handle.disposed).toBe(true);
    await expect(model.backward(fw, new Float32Array(3))).rejects.toThrow(/forward handle is disposed/);
    other.dispose();
    await expect(other.forward(ok)).rejects.toThrow(/model is disposed/);
  });

  it('bad optimizer and clipping arguments', async () => {
    await expect(model.step({ lr: NaN })).rejects.toThrow(/lr must be/);
    await expect(model.step({ lr: 1e-3, beta1: 1 })).rejects.toThrow(/beta1 and beta2/);
    await expect(model.clipGradNorm(-1)).rejects.toThrow(/maxNorm must be a positive/);
  });

  it('bad configs', () => {
    expect(() => Model.create({ vocabSize: 10, hiddenSize: 16, intermediateSize: 8, numHiddenLayers: 1, numAttentionHeads: 3 })).toThrow(
      ConfigError,
    );
    expect(() =>
      Model.create({ vocabSize: 10, hiddenSize: 16, intermediateSize: 8, numHiddenLayers: 1, numAttentionHeads: 4, numKeyValueHeads: 3 }),
    ).toThrow(/multiple of num_key_value_heads/);
    expect(() => parseHfConfig({ model_type: 'llama', hidden_act: 'gelu' })).toThrow(/hidden_act must be "silu"/);
    expect(() =>
      parseHfConfig({
        model_type: 'llama',
        vocab_size: 10,
        hidden_size: 8,
        intermediate_size: 8,
        num_hidden_layers: 1,
        num_attention_heads: 2,
        rope_scaling: { rope_type: 'yarn', factor: 2 },
      }),
    ).toThrow(/yarn.*not supported/);
  });

  it('the process is still alive and computing after all of the above', async () => {
    const fw = await model.forward(ok);
    expect(Number.isFinite(fw.logp[1])).toBe(true);
    await model.backward(fw, new Float32Array([0, 1, 1]));
    fw.handle.dispose();
  });
});

describe('loader', () => {
  it('a missing binary is one clear error listing the fixes', () => {
    let msg = '';
    try {
      selectEngine({ ANVIL_ENGINE_BINARY: '/nonexistent/anvil_engine.node' });
    } catch (e) {
      msg = (e as Error).message;
      expect((e as Error).name).toBe('EngineLoadError');
    }
    expect(msg).toMatch(/the binary does not exist/);
    expect(msg).toMatch(/npm run build:native/);
    expect(msg).toMatch(/libopenblas-dev/);
  });

  it('backend selection: cpu by default, forced cpu, cuda unusable or not built, bad value', () => {
    const cudaBuilt = existsSync(join(findRepoRoot(), 'libs/engine/build-cuda/anvil_engine_cuda.node'));
    const def = selectEngine({});
    expect(selectEngine({ ANVIL_ENGINE_BACKEND: 'cpu' }).reason).toBe('ANVIL_ENGINE_BACKEND=cpu');
    expect(() => selectEngine({ ANVIL_ENGINE_BACKEND: 'tpu' })).toThrow(/must be "cpu" or "cuda"/);
    if (!cudaBuilt) {
      expect(def.backend).toBe('cpu');
      expect(def.reason).toMatch(/no CUDA build/);
      expect(() => selectEngine({ ANVIL_ENGINE_BACKEND: 'cuda' })).toThrow(/no CUDA build exists/);
    } else if (def.backend === 'cpu') {
      // built where nvcc exists but no usable GPU here: the CPU is taken and the reason says why
      expect(def.reason).toMatch(/CUDA build present but unusable .*no usable device/);
      expect(() => selectEngine({ ANVIL_ENGINE_BACKEND: 'cuda' })).toThrow(/no usable device/);
    } else {
      expect(def.reason).toMatch(/has a device/);
      expect(def.info.device?.ok).toBe(true);
    }
  });
});
