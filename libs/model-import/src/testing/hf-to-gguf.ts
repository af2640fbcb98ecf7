// A Hugging Face checkpoint (tensors by transformers name) as a GGUF file, the way llama.cpp's
// convert_hf_to_gguf.py writes one: llama.cpp tensor names, ne[] the reverse of the shape, the Q
// and K projections of Llama permuted for llama.cpp's RoPE (LlamaModel.permute, transcribed
// literally as reshape → swapaxes → reshape), each tensor in the type asked for.
import { GgufValueType } from '../gguf-format';
import { kv, writeGguf, type Kv, type TensorToWrite } from './gguf-writer';
import { bf16Bytes, f16Bytes, f32Bytes, quantizeQ4_0, quantizeQ4_1, quantizeQ8_0 } from './quantize';
import { tokenizerMetadata, type TinyVocab, type TokenizerMetadataOptions } from './tiny-vocab';

export type TestType = 'F32' | 'F16' | 'BF16' | 'Q8_0' | 'Q4_0' | 'Q4_1';
export const TYPE_IDS: Record<TestType, number> = { F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q8_0: 8, BF16: 30 };

export function encodeAs(type: TestType, x: Float32Array): Uint8Array {
  switch (type) {
    case 'F32':
      return f32Bytes(x);
    case 'F16':
      return f16Bytes(x);
    case 'BF16':
      return bf16Bytes(x);
    case 'Q8_0':
      return quantizeQ8_0(x);
    case 'Q4_0':
      return quantizeQ4_0(x);
    case 'Q4_1':
      return quantizeQ4_1(x);
  }
}

export interface HfTensor {
  name: string;
  shape: readonly number[];
  data: Float32Array;
}

export interface HfModelConfig {
  architecture: 'llama' | 'qwen2';
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  ropeTheta: number;
  rmsNormEps: number;
  contextLength: number;
}

const RENAMES: Array<[RegExp, string]> = [
  [/^model\.embed_tokens\.weight$/, 'token_embd.weight'],
  [/^model\.norm\.weight$/, 'output_norm.weight'],
  [/^lm_head\.weight$/, 'output.weight'],
  [/^model\.layers\.(\d+)\.input_layernorm\.weight$/, 'blk.$1.attn_norm.weight'],
  [/^model\.layers\.(\d+)\.post_attention_layernorm\.weight$/, 'blk.$1.ffn_norm.weight'],
  [/^model\.layers\.(\d+)\.self_attn\.q_proj\.(weight|bias)$/, 'blk.$1.attn_q.$2'],
  [/^model\.layers\.(\d+)\.self_attn\.k_proj\.(weight|bias)$/, 'blk.$1.attn_k.$2'],
  [/^model\.layers\.(\d+)\.self_attn\.v_proj\.(weight|bias)$/, 'blk.$1.attn_v.$2'],
  [/^model\.layers\.(\d+)\.self_attn\.o_proj\.weight$/, 'blk.$1.attn_output.weight'],
  [/^model\.layers\.(\d+)\.mlp\.gate_proj\.weight$/, 'blk.$1.ffn_gate.weight'],
  [/^model\.layers\.(\d+)\.mlp\.up_proj\.weight$/, 'blk.$1.ffn_up.weight'],
  [/^model\.layers\.(\d+)\.mlp\.down_proj\.weight$/, 'blk.$1.ffn_down.weight'],
];

export function ggufName(hf: string): string {
  for (const [re, to] of RENAMES) if (re.test(hf)) return hf.replace(re, to);
  throw new Error(`no llama.cpp name for ${hf}`);
}

/**
 * convert_hf_to_gguf.py LlamaModel.permute:
 *   w.reshape(n_head, 2, rows // n_head // 2, *rest).swapaxes(1, 2).reshape(w.shape)
 */
export function llamaPermute(w: Float32Array, rows: number, cols: number, nHead: number): Float32Array {
  const half = rows / nHead / 2;
  // input viewed as [nHead][2][half][cols]; output as [nHead][half][2][cols] with out[a][b][c] = in[a][c][b]
  const out = new Float32Array(w.length);
  for (let a = 0; a < nHead; a++)
    for (let b = 0; b < half; b++)
      for (let c = 0; c < 2; c++)
        for (let d = 0; d < cols; d++) out[((a * half + b) * 2 + c) * cols + d] = w[((a * 2 + c) * half + b) * cols + d];
  return out;
}

export interface HfToGgufOptions {
  config: HfModelConfig;
  tensors: readonly HfTensor[];
  vocab: TinyVocab;
  /** Type of each tensor (default: F32 for everything). */
  typeOf?: (hfName: string, shape: readonly number[]) => TestType;
  /** Write Q/K in transformers' order even for llama (a broken converter; the import must then differ). */
  skipPermute?: boolean;
  tokenizer?: TokenizerMetadataOptions;
  /** Extra or replacement metadata entries. */
  metadata?: Kv[];
  version?: number;
}

export function hfToGguf(o: HfToGgufOptions): Buffer {
  const c = o.config;
  const a = c.architecture;
  const metadata: Kv[] = [
    kv.str('general.architecture', a),
    kv.str('general.name', 'tiny test model'),
    kv.u32(`${a}.block_count`, c.numLayers),
    kv.u32(`${a}.context_length`, c.contextLength),
    kv.u32(`${a}.embedding_length`, c.hiddenSize),
    kv.u32(`${a}.feed_forward_length`, c.intermediateSize),
    kv.u32(`${a}.attention.head_count`, c.numHeads),
    kv.u32(`${a}.attention.head_count_kv`, c.numKvHeads),
    kv.f32(`${a}.rope.freq_base`, c.ropeTheta),
    kv.f32(`${a}.attention.layer_norm_rms_epsilon`, c.rmsNormEps),
    kv.u32(`${a}.rope.dimension_count`, c.hiddenSize / c.numHeads),
    { key: 'general.file_type', type: GgufValueType.UINT32, value: 0 },
    ...tokenizerMetadata(o.vocab, o.tokenizer),
  ];
  for (const m of o.metadata ?? []) {
    const i = metadata.findIndex((x) => x.key === m.key);
    if (i >= 0) metadata[i] = m;
    else metadata.push(m);
  }
  const tensors: TensorToWrite[] = o.tensors.map((t) => {
    const name = ggufName(t.name);
    let data = t.data;
    const rows = t.shape[0];
    const cols = t.shape.length > 1 ? t.shape[1] : 1;
    if (a === 'llama' && !o.skipPermute) {
      if (/attn_q\./.test(name)) data = llamaPermute(data, rows, cols, c.numHeads);
      if (/attn_k\./.test(name)) data = llamaPermute(data, rows, cols, c.numKvHeads);
    }
    const type = o.typeOf?.(t.name, t.shape) ?? 'F32';
    return { name, dims: [...t.shape].reverse(), type: TYPE_IDS[type], data: encodeAs(type, data) };
  });
  return writeGguf({ version: o.version, metadata, tensors });
}

/** Random transformers-named tensors of a model (for tests that need a valid file, not a meaningful model). */
export function randomCheckpoint(c: HfModelConfig, vocabSize: number, opts: { tie?: boolean; seed?: number } = {}): HfTensor[] {
  let s = opts.seed ?? 1;
  const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32) * 0.2 - 0.1;
  const t = (name: string, shape: number[]): HfTensor => ({
    name,
    shape,
    data: Float32Array.from({ length: shape.reduce((a, d) => a * d, 1) }, rnd),
  });
  const h = c.hiddenSize;
  const hd = h / c.numHeads;
  const out = [t('model.embed_tokens.weight', [vocabSize, h])];
  for (let i = 0; i < c.numLayers; i++) {
    const p = `model.layers.${i}.`;
    out.push(
      t(`${p}input_layernorm.weight`, [h]),
      t(`${p}self_attn.q_proj.weight`, [c.numHeads * hd, h]),
      t(`${p}self_attn.k_proj.weight`, [c.numKvHeads * hd, h]),
      t(`${p}self_attn.v_proj.weight`, [c.numKvHeads * hd, h]),
      t(`${p}self_attn.o_proj.weight`, [h, c.numHeads * hd]),
      t(`${p}post_attention_layernorm.weight`, [h]),
      t(`${p}mlp.gate_proj.weight`, [c.intermediateSize, h]),
      t(`${p}mlp.up_proj.weight`, [c.intermediateSize, h]),
      t(`${p}mlp.down_proj.weight`, [h, c.intermediateSize]),
    );
    if (c.architecture === 'qwen2')
      out.push(
        t(`${p}self_attn.q_proj.bias`, [c.numHeads * hd]),
        t(`${p}self_attn.k_proj.bias`, [c.numKvHeads * hd]),
        t(`${p}self_attn.v_proj.bias`, [c.numKvHeads * hd]),
      );
  }
  out.push(t('model.norm.weight', [h]));
  if (!opts.tie) out.push(t('lm_head.weight', [vocabSize, h]));
  return out;
}

/** A small valid llama config for tests that need a file, not a model. */
export const TINY_LLAMA: HfModelConfig = {
  architecture: 'llama',
  hiddenSize: 32,
  intermediateSize: 64,
  numLayers: 1,
  numHeads: 2,
  numKvHeads: 1,
  ropeTheta: 10000,
  rmsNormEps: 1e-6,
  contextLength: 2048,
};
