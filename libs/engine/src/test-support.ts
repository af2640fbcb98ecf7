// Helpers shared by the engine's tests: a seeded RNG, random sample sets that form trees, and an
// independent reference forward pass in plain TypeScript (Float64, naive loops, causal attention
// over a flat sequence, HF rotate-half RoPE) written straight from the transformers modeling code.
import type { ModelConfig } from './config';
import type { Model } from './model';

export { seededRandom as rng } from '@anvil/rl';

export function randInt(r: () => number, lo: number, hi: number): number {
  return lo + Math.floor(r() * (hi - lo + 1));
}

export function randn(r: () => number): number {
  const u = 1 - r();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * r());
}

export interface TestSample {
  promptIds: number[];
  outputIds: number[];
  weights?: number[];
}

/**
 * Random samples whose prefixes overlap: each new sample either starts a new root or copies a
 * random-length prefix of an earlier sample and appends fresh tokens, so the merged trie has
 * random depth, branching and several roots.
 */
export function randomTreeSamples(r: () => number, vocab: number, n: number, maxExtra = 6): TestSample[] {
  const seqs: number[][] = [];
  const out: TestSample[] = [];
  for (let i = 0; i < n; i++) {
    let seq: number[];
    if (seqs.length && r() < 0.8) {
      const base = seqs[randInt(r, 0, seqs.length - 1)];
      seq = base.slice(0, randInt(r, 1, base.length));
    } else seq = [randInt(r, 0, vocab - 1)];
    const extra = randInt(r, 1, maxExtra);
    for (let k = 0; k < extra; k++) seq.push(randInt(r, 0, vocab - 1));
    seqs.push(seq);
    const p = randInt(r, 1, seq.length - 1);
    out.push({ promptIds: seq.slice(0, p), outputIds: seq.slice(p) });
  }
  return out;
}

// ---------------- reference forward (Float64) ----------------

function get(model: Model, name: string): Float64Array {
  return Float64Array.from(model.tensor(name).data);
}

/** y[O] = W[O,I] x[I] (+ b) */
function linear(W: Float64Array, x: Float64Array, O: number, I: number, b?: Float64Array): Float64Array {
  const y = new Float64Array(O);
  for (let o = 0; o < O; o++) {
    let s = b ? b[o] : 0;
    for (let i = 0; i < I; i++) s += W[o * I + i] * x[i];
    y[o] = s;
  }
  return y;
}

function rmsnorm(x: Float64Array, w: Float64Array, eps: number): Float64Array {
  let ss = 0;
  for (const v of x) ss += v * v;
  const r = 1 / Math.sqrt(ss / x.length + eps);
  return x.map((v, i) => v * r * w[i]);
}

/** transformers' inv_freq, including rope_scaling (re-derived here, independently of config.ts). */
export function referenceInvFreq(c: ModelConfig): Float64Array {
  const d = c.headDim;
  const inv = new Float64Array(d / 2).map((_, i) => 1 / Math.pow(c.ropeTheta, (2 * i) / d));
  const rs = c.ropeScaling;
  if (rs?.type === 'linear') return inv.map((f) => f / rs.factor);
  if (rs?.type === 'llama3') {
    const lowWl = rs.originalMaxPositionEmbeddings / rs.lowFreqFactor;
    const highWl = rs.originalMaxPositionEmbeddings / rs.highFreqFactor;
    return inv.map((f) => {
      const wl = (2 * Math.PI) / f;
      if (wl < highWl) return f; // high frequency: unchanged
      if (wl > lowWl) return f / rs.factor; // low frequency: scaled
      const smooth = (rs.originalMaxPositionEmbeddings / wl - rs.lowFreqFactor) / (rs.highFreqFactor - rs.lowFreqFactor);
      return (1 - smooth) * (f / rs.factor) + smooth * f;
    });
  }
  return inv;
}

/** HF apply_rotary_pos_emb on one head vector: x * cos + rotate_half(x) * sin, emb = cat(freqs, freqs). */
function rope(x: Float64Array, pos: number, inv: Float64Array): Float64Array {
  const half = x.length / 2;
  const out = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const f = inv[i % half] * pos;
    const rot = i < half ? -x[i + half] : x[i - half]; // rotate_half = cat(-x2, x1)
    out[i] = x[i] * Math.cos(f) + rot * Math.sin(f);
  }
  return out;
}

/**
 * log p(seq[t] | seq[<t]) for t = 1..T-1 (index t-1 of the result) and the entropy of each of those
 * predictive distributions, by a naive causal forward over the flat sequence.
 */
export function referenceForward(model: Model, seq: number[]): { logp: Float64Array; entropy: Float64Array } {
  const c = model.config;
  const C = c.hiddenSize,
    H = c.numAttentionHeads,
    KVH = c.numKeyValueHeads,
    D = c.headDim,
    F = c.intermediateSize;
  const V = c.vocabSize,
    T = seq.length,
    rep = H / KVH;
  const inv = referenceInvFreq(c);
  const emb = get(model, 'model.embed_tokens.weight');
  let x = seq.map((t) => emb.slice(t * C, (t + 1) * C));
  for (let l = 0; l < c.numHiddenLayers; l++) {
    const p = `model.layers.${l}.`;
    const W = (n: string) => get(model, p + n);
    const Wq = W('self_attn.q_proj.weight'),
      Wk = W('self_attn.k_proj.weight'),
      Wv = W('self_attn.v_proj.weight');
    const Wo = W('self_attn.o_proj.weight');
    const bq = c.attentionBias ? W('self_attn.q_proj.bias') : undefined;
    const bk = c.attentionBias ? W('self_attn.k_proj.bias') : undefined;
    const bv = c.attentionBias ? W('self_attn.v_proj.bias') : undefined;
    const ln1 = W('input_layernorm.weight'),
      ln2 = W('post_attention_layernorm.weight');
    const Wg = W('mlp.gate_proj.weight'),
      Wu = W('mlp.up_proj.weight'),
      Wd = W('mlp.down_proj.weight');
    const hs = x.map((v) => rmsnorm(v, ln1, c.rmsNormEps));
    const q = hs.map((h) => linear(Wq, h, H * D, C, bq));
    const k = hs.map((h) => linear(Wk, h, KVH * D, C, bk));
    const v = hs.map((h) => linear(Wv, h, KVH * D, C, bv));
    const qh = q.map((row, t) => Array.from({ length: H }, (_, h) => rope(row.slice(h * D, (h + 1) * D), t, inv)));
    const kh = k.map((row, t) => Array.from({ length: KVH }, (_, h) => rope(row.slice(h * D, (h + 1) * D), t, inv)));
    const att = x.map(() => new Float64Array(H * D));
    for (let t = 0; t < T; t++)
      for (let h = 0; h < H; h++) {
        const kvh = Math.floor(h / rep); // repeat_kv
        const s = new Float64Array(t + 1);
        for (let u = 0; u <= t; u++) {
          let d = 0;
          for (let i = 0; i < D; i++) d += qh[t][h][i] * kh[u][kvh][i];
          s[u] = d / Math.sqrt(D);
        }
        const mx = Math.max(...s);
        let z = 0;
        for (let u = 0; u <= t; u++) z += Math.exp(s[u] - mx);
        for (let u = 0; u <= t; u++) {
          const pr = Math.exp(s[u] - mx) / z;
          for (let i = 0; i < D; i++) att[t][h * D + i] += pr * v[u][kvh * D + i];
        }
      }
    x = x.map((xi, t) => {
      const o = linear(Wo, att[t], C, H * D);
      const mid = xi.map((a, i) => a + o[i]);
      const h2 = rmsnorm(mid, ln2, c.rmsNormEps);
      const g = linear(Wg, h2, F, C),
        u = linear(Wu, h2, F, C);
      const m = g.map((gi, i) => (gi / (1 + Math.exp(-gi))) * u[i]);
      const d = linear(Wd, m, C, F);
      return mid.map((a, i) => a + d[i]);
    });
  }
  const nf = get(model, 'model.norm.weight');
  const lm = c.tieWordEmbeddings ? emb : get(model, 'lm_head.weight');
  const logp = new Float64Array(T - 1);
  const entropy = new Float64Array(T - 1);
  for (let t = 1; t < T; t++) {
    const logits = linear(lm, rmsnorm(x[t - 1], nf, c.rmsNormEps), V, C);
    const mx = Math.max(...logits);
    let z = 0;
    for (const v of logits) z += Math.exp(v - mx);
    const lse = mx + Math.log(z);
    logp[t - 1] = logits[seq[t]] - lse;
    let ent = 0;
    for (const v of logits) ent -= Math.exp(v - lse) * (v - lse);
    entropy[t - 1] = ent;
  }
  return { logp, entropy };
}
