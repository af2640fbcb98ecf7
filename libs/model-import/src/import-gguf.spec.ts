import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Model, parseSafetensors, toFloat32, type ModelConfigInput } from '@anvil/engine';
import { unpermuteRows } from './architecture';
import { importGguf } from './import-gguf';
import { blockTolerance, ggufName, hfToGguf, llamaPermute, tinyVocab, type HfModelConfig, type TestType } from './testing';

const dir = mkdtempSync(join(tmpdir(), 'gguf-import-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const vocab = tinyVocab();
const V = vocab.tokens.length;

/** A tiny engine model with every tensor random (norms around 1, biases nonzero), so that no mistake hides behind a 0 or a 1. */
function tinyModel(over: Partial<ModelConfigInput> = {}, seed = 1): Model {
  const m = Model.create(
    {
      modelType: 'llama',
      vocabSize: V,
      hiddenSize: 64,
      intermediateSize: 96,
      numHiddenLayers: 2,
      numAttentionHeads: 4,
      numKeyValueHeads: 2,
      ropeTheta: 10000,
      rmsNormEps: 1e-5,
      maxPositionEmbeddings: 512,
      ...over,
    },
    { seed, initStd: 0.2 },
  );
  let s = seed * 7919;
  const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32) * 2 - 1;
  for (const t of m.tensors) {
    if (t.name.endsWith('norm.weight')) t.data.forEach((_, i) => (t.data[i] = 1 + 0.3 * rnd()));
    if (t.name.endsWith('.bias')) t.data.forEach((_, i) => (t.data[i] = 0.5 * rnd()));
  }
  return m;
}

function ggufConfig(m: Model): HfModelConfig {
  const c = m.config;
  return {
    architecture: c.modelType,
    hiddenSize: c.hiddenSize,
    intermediateSize: c.intermediateSize,
    numLayers: c.numHiddenLayers,
    numHeads: c.numAttentionHeads,
    numKvHeads: c.numKeyValueHeads,
    ropeTheta: c.ropeTheta,
    rmsNormEps: c.rmsNormEps,
    contextLength: c.maxPositionEmbeddings,
  };
}

let n = 0;
async function importModel(m: Model, opts: { typeOf?: (name: string) => TestType; skipPermute?: boolean } = {}): Promise<string> {
  const file = join(dir, `m${++n}.gguf`);
  writeFileSync(file, hfToGguf({ config: ggufConfig(m), tensors: m.tensors, vocab, ...opts }));
  const out = join(dir, `m${n}`);
  await importGguf(file, out);
  return out;
}

/** log p(next | prefix) for every token of the vocabulary, and of each prefix token given the ones before. */
async function logps(m: Model, prefix: number[]): Promise<Float32Array> {
  const nodes = prefix.length + m.config.vocabSize;
  const tokens = new Int32Array(nodes);
  const parents = new Int32Array(nodes);
  prefix.forEach((t, i) => ((tokens[i] = t), (parents[i] = i - 1)));
  for (let v = 0; v < m.config.vocabSize; v++) {
    tokens[prefix.length + v] = v;
    parents[prefix.length + v] = prefix.length - 1;
  }
  const r = await m.forward({ tokens, parents });
  r.handle.dispose();
  return r.logp;
}

const maxDiff = (a: Float32Array, b: Float32Array) => a.reduce((w, x, i) => Math.max(w, Math.abs(x - b[i])), 0);
const PREFIX = [vocab.ids.imStart, 300, 17, 90, 250, 301, 5, 260, 261];

describe('importGguf: the engine runs the imported checkpoint exactly as the model it was written from', () => {
  for (const tie of [true, false]) {
    it(`llama, ${tie ? 'tied' : 'untied'} embeddings: same log-probs over the whole vocabulary at every position`, async () => {
      const original = tinyModel({ tieWordEmbeddings: tie });
      const out = await importModel(original);
      const loaded = await Model.load(out);
      expect(loaded.config.tieWordEmbeddings).toBe(tie);
      expect(maxDiff(await logps(loaded, PREFIX), await logps(original, PREFIX))).toBeLessThanOrEqual(1e-6);
      original.dispose();
      loaded.dispose();
    });
  }

  it("undoes llama.cpp's Q/K permutation: the same weights written without it give another model", async () => {
    const original = tinyModel({}, 2);
    const loaded = await Model.load(await importModel(original, { skipPermute: true }));
    expect(maxDiff(await logps(loaded, PREFIX), await logps(original, PREFIX))).toBeGreaterThan(1e-2);
    original.dispose();
    loaded.dispose();
  });

  it('qwen2: q/k/v biases, tied embeddings, no permutation', async () => {
    const original = tinyModel({ modelType: 'qwen2', tieWordEmbeddings: true }, 3);
    const out = await importModel(original);
    const loaded = await Model.load(out);
    expect(loaded.config.attentionBias).toBe(true);
    expect(maxDiff(await logps(loaded, PREFIX), await logps(original, PREFIX))).toBeLessThanOrEqual(1e-6);
    original.dispose();
    loaded.dispose();
  });

  it('writes config.json from the GGUF metadata', async () => {
    const original = tinyModel({ tieWordEmbeddings: true, rmsNormEps: 1e-5, ropeTheta: 100000 }, 4);
    const out = await importModel(original);
    original.dispose();
    const cfg = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')) as Record<string, unknown>;
    expect(cfg).toMatchObject({
      architectures: ['LlamaForCausalLM'],
      model_type: 'llama',
      vocab_size: V,
      hidden_size: 64,
      intermediate_size: 96,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      head_dim: 16,
      hidden_act: 'silu',
      max_position_embeddings: 512,
      rms_norm_eps: 1e-5, // the float32 in the file, written as the decimal it came from
      rope_theta: 100000,
      rope_scaling: null,
      tie_word_embeddings: true,
      attention_bias: false,
      bos_token_id: vocab.ids.imStart,
      eos_token_id: vocab.ids.imEnd,
      pad_token_id: vocab.ids.imEnd,
      torch_dtype: 'float32',
    });
    const record = JSON.parse(readFileSync(join(out, 'anvil-import.json'), 'utf8')) as Record<string, unknown>;
    expect(record).toMatchObject({ format: 'gguf', architecture: 'llama', tensorTypes: { F32: 2 * 9 + 2 }, dtype: 'F32' });
    expect(record.sha256).toMatch(/^[0-9a-f]{64}$/);
  });

  it("quantized like SmolLM2's file (Q8_0 embedding, Q4_1/Q4_0 projections, F16/BF16 and F32 norms): every weight within its type's error, and it runs", async () => {
    const original = tinyModel({ tieWordEmbeddings: true }, 5);
    const typeOf = (name: string): TestType => {
      if (name.includes('embed_tokens')) return 'Q8_0';
      if (name.includes('norm')) return name.includes('layers.0') ? 'F16' : name.includes('layers.1') ? 'BF16' : 'F32';
      return /q_proj|down_proj/.test(name) ? 'Q4_0' : 'Q4_1';
    };
    const out = await importModel(original, { typeOf });
    const st = parseSafetensors(readFileSync(join(out, 'model.safetensors')));
    const record = JSON.parse(readFileSync(join(out, 'anvil-import.json'), 'utf8')) as { tensorTypes: Record<string, number> };
    expect(record.tensorTypes).toEqual({ Q8_0: 1, Q4_0: 4, Q4_1: 10, F16: 2, BF16: 2, F32: 1 });
    for (const t of original.tensors) {
      const got = new Float32Array(t.numel);
      toFloat32(st.tensors.get(t.name)!, got, t.name);
      expect(st.tensors.get(t.name)!.dtype).toBe('F32');
      // Quantization works on ggml's rows, which for Q and K are llama.cpp's permuted ones.
      const heads = t.name.includes('q_proj') ? 4 : t.name.includes('k_proj') ? 2 : 0;
      const cols = t.shape[1] ?? 1;
      const src = heads ? llamaPermute(t.data, t.shape[0], cols, heads) : t.data;
      const dst = heads ? llamaPermute(got, t.shape[0], cols, heads) : got;
      const type = typeOf(t.name);
      const block = type.startsWith('Q') ? 32 : 1;
      for (let b = 0; b < src.length; b += block) {
        const tol = blockTolerance(type, src.subarray(b, b + block));
        for (let j = b; j < b + block; j++)
          expect(Math.abs(dst[j] - src[j]), `${t.name}[${j}] (${ggufName(t.name)}, ${type})`).toBeLessThanOrEqual(tol);
      }
    }
    const loaded = await Model.load(out);
    const a = await logps(loaded, PREFIX);
    const b = await logps(original, PREFIX);
    // Close to the float model (4-bit weights move the log-probs a little, not a lot).
    const mean = a.reduce((s, x, i) => s + Math.abs(x - b[i]), 0) / a.length;
    expect(mean).toBeLessThan(0.5);
    expect(Number.isFinite(mean)).toBe(true);
    original.dispose();
    loaded.dispose();
  });
});

describe('unpermuteRows', () => {
  it("inverts convert_hf_to_gguf.py's permute for weights and biases, any head count", () => {
    let s = 9;
    const rnd = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
    for (const [heads, headDim, cols] of [
      [1, 4, 1],
      [4, 16, 64],
      [3, 64, 1],
      [9, 8, 5],
    ]) {
      const rows = heads * headDim;
      const w = Float32Array.from({ length: rows * cols }, rnd);
      const p = llamaPermute(w, rows, cols, heads);
      expect([...p]).not.toEqual([...w]);
      expect([...unpermuteRows(p, heads, cols)]).toEqual([...w]);
    }
  });
});
