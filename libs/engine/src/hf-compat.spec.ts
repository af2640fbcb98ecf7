// Hugging Face compatibility: tensor names and shapes exactly as transformers'
// LlamaForCausalLM / Qwen2ForCausalLM, and log-probs equal to an independent reference forward
// (plain TypeScript, Float64, naive causal attention over a flat sequence, HF rotate-half RoPE).
import { describe, expect, it } from 'vitest';
import { Model, ModelConfigInput } from './index';
import { randInt, referenceForward, rng } from './test-support';

function expectedLayout(c: {
  V: number;
  C: number;
  F: number;
  L: number;
  H: number;
  KVH: number;
  D: number;
  bias: boolean;
  tied: boolean;
}): Array<[string, number[]]> {
  const out: Array<[string, number[]]> = [['model.embed_tokens.weight', [c.V, c.C]]];
  for (let l = 0; l < c.L; l++) {
    const p = `model.layers.${l}.`;
    out.push([p + 'input_layernorm.weight', [c.C]]);
    out.push([p + 'self_attn.q_proj.weight', [c.H * c.D, c.C]]);
    out.push([p + 'self_attn.k_proj.weight', [c.KVH * c.D, c.C]]);
    out.push([p + 'self_attn.v_proj.weight', [c.KVH * c.D, c.C]]);
    if (c.bias) {
      out.push([p + 'self_attn.q_proj.bias', [c.H * c.D]]);
      out.push([p + 'self_attn.k_proj.bias', [c.KVH * c.D]]);
      out.push([p + 'self_attn.v_proj.bias', [c.KVH * c.D]]);
    }
    out.push([p + 'self_attn.o_proj.weight', [c.C, c.H * c.D]]);
    out.push([p + 'post_attention_layernorm.weight', [c.C]]);
    out.push([p + 'mlp.gate_proj.weight', [c.F, c.C]]);
    out.push([p + 'mlp.up_proj.weight', [c.F, c.C]]);
    out.push([p + 'mlp.down_proj.weight', [c.C, c.F]]);
  }
  out.push(['model.norm.weight', [c.C]]);
  if (!c.tied) out.push(['lm_head.weight', [c.V, c.C]]);
  return out;
}

const sorted = (x: Array<[string, number[]]>) => [...x].sort((a, b) => a[0].localeCompare(b[0]));

describe('Hugging Face compatibility', () => {
  it('LlamaForCausalLM names and shapes (GQA, untied, explicit head_dim)', () => {
    const m = Model.create({
      vocabSize: 100,
      hiddenSize: 48,
      intermediateSize: 80,
      numHiddenLayers: 2,
      numAttentionHeads: 4,
      numKeyValueHeads: 2,
      headDim: 16,
    });
    const got = m.tensors.map((t) => [t.name, [...t.shape]] as [string, number[]]);
    expect(sorted(got)).toEqual(sorted(expectedLayout({ V: 100, C: 48, F: 80, L: 2, H: 4, KVH: 2, D: 16, bias: false, tied: false })));
  });

  it('Qwen2ForCausalLM names and shapes (q/k/v bias, tied)', () => {
    const m = Model.create({
      modelType: 'qwen2',
      vocabSize: 64,
      hiddenSize: 32,
      intermediateSize: 64,
      numHiddenLayers: 3,
      numAttentionHeads: 4,
      numKeyValueHeads: 1,
      tieWordEmbeddings: true,
    });
    expect(m.config.attentionBias).toBe(true);
    const got = m.tensors.map((t) => [t.name, [...t.shape]] as [string, number[]]);
    expect(sorted(got)).toEqual(sorted(expectedLayout({ V: 64, C: 32, F: 64, L: 3, H: 4, KVH: 1, D: 8, bias: true, tied: true })));
  });

  const cases: Array<[string, ModelConfigInput]> = [
    [
      'single-layer llama, MHA',
      { vocabSize: 40, hiddenSize: 16, intermediateSize: 24, numHiddenLayers: 1, numAttentionHeads: 2, numKeyValueHeads: 2 },
    ],
    [
      'llama GQA, untied, llama3 rope scaling, eps 1e-5',
      {
        vocabSize: 57,
        hiddenSize: 32,
        intermediateSize: 40,
        numHiddenLayers: 2,
        numAttentionHeads: 4,
        numKeyValueHeads: 2,
        rmsNormEps: 1e-5,
        ropeTheta: 500,
        ropeScaling: { type: 'llama3', factor: 4, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 24 },
      },
    ],
    [
      'llama linear rope scaling, explicit head_dim',
      {
        vocabSize: 33,
        hiddenSize: 24,
        intermediateSize: 30,
        numHiddenLayers: 1,
        numAttentionHeads: 2,
        numKeyValueHeads: 1,
        headDim: 16,
        ropeScaling: { type: 'linear', factor: 2.5 },
      },
    ],
    [
      'llama head_dim 40 (vector kernels: 32-wide + 8-wide tails)',
      { vocabSize: 30, hiddenSize: 32, intermediateSize: 48, numHiddenLayers: 1, numAttentionHeads: 2, numKeyValueHeads: 1, headDim: 40 },
    ],
    [
      'qwen2 (bias), tied, GQA',
      {
        modelType: 'qwen2',
        vocabSize: 45,
        hiddenSize: 24,
        intermediateSize: 36,
        numHiddenLayers: 2,
        numAttentionHeads: 3,
        numKeyValueHeads: 1,
        tieWordEmbeddings: true,
        ropeTheta: 1e6,
      },
    ],
  ];
  for (const [label, cfg] of cases) {
    it(`log-probs and entropies match the Float64 reference: ${label}`, async () => {
      const r = rng(label.length);
      const m = Model.create(cfg, { seed: 3, initStd: 0.3 });
      if (m.config.attentionBias)
        for (const t of m.tensors) if (t.name.endsWith('.bias')) t.data.forEach((_, i) => (t.data[i] = 0.2 * (r() - 0.5)));
      for (const t of m.tensors) if (t.name.includes('norm')) t.data.forEach((_, i) => (t.data[i] = 0.5 + r()));
      const T = 30;
      const seq = Array.from({ length: T }, () => randInt(r, 0, m.config.vocabSize - 1));
      const parents = Int32Array.from(seq, (_, i) => i - 1);
      const fw = await m.forward({ tokens: Int32Array.from(seq), parents });
      const ref = referenceForward(m, seq);
      expect(fw.hasLogp[0]).toBe(0);
      expect(fw.logp[0]).toBe(0);
      let maxErr = 0;
      for (let t = 1; t < T; t++) {
        maxErr = Math.max(maxErr, Math.abs(fw.logp[t] - ref.logp[t - 1]), Math.abs(fw.entropy[t] - ref.entropy[t - 1]));
      }
      expect(maxErr).toBeLessThan(2e-4);
      fw.handle.dispose();
    });
  }
});
