// Llama and Qwen2 GGUF files in Hugging Face terms: the hyperparameters (llama.cpp's
// `<arch>.*` metadata keys) as a transformers config.json, and every tensor's llama.cpp name
// (convert_hf_to_gguf.py / gguf-py tensor_mapping.py) as its transformers name and shape.
import { GgufError, type GgufTensorInfo } from './gguf-reader';
import type { GgufMetadata } from './gguf-metadata';

export type Architecture = 'llama' | 'qwen2';
export const ARCHITECTURES: readonly Architecture[] = ['llama', 'qwen2'];

export class UnsupportedModelError extends Error {
  override name = 'UnsupportedModelError';
}

export interface ModelShape {
  architecture: Architecture;
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  ropeTheta: number;
  rmsNormEps: number;
  maxPositionEmbeddings: number;
  ropeScaling: { rope_type: 'linear'; factor: number } | null;
  attentionBias: boolean;
  tieWordEmbeddings: boolean;
}

export interface TensorPlan {
  gguf: GgufTensorInfo;
  hfName: string;
  /** PyTorch order: the reverse of ggml's ne[]. */
  shape: number[];
  /** llama.cpp permuted this Q/K projection's rows for its RoPE layout over this many heads: undo it. */
  unpermuteHeads?: number;
}

/** The llama.cpp name (after `blk.N.`) of each per-layer tensor, and its transformers name (after `model.layers.N.`). */
const LAYER_TENSORS: ReadonlyArray<[string, string]> = [
  ['attn_norm.weight', 'input_layernorm.weight'],
  ['attn_q.weight', 'self_attn.q_proj.weight'],
  ['attn_k.weight', 'self_attn.k_proj.weight'],
  ['attn_v.weight', 'self_attn.v_proj.weight'],
  ['attn_output.weight', 'self_attn.o_proj.weight'],
  ['ffn_norm.weight', 'post_attention_layernorm.weight'],
  ['ffn_gate.weight', 'mlp.gate_proj.weight'],
  ['ffn_up.weight', 'mlp.up_proj.weight'],
  ['ffn_down.weight', 'mlp.down_proj.weight'],
];
const BIAS_TENSORS: ReadonlyArray<[string, string]> = [
  ['attn_q.bias', 'self_attn.q_proj.bias'],
  ['attn_k.bias', 'self_attn.k_proj.bias'],
  ['attn_v.bias', 'self_attn.v_proj.bias'],
];

/** Tensors llama.cpp may carry for features the engine does not have, with what they mean. */
const UNSUPPORTED_TENSORS: ReadonlyArray<[RegExp, string]> = [
  [/^rope_freqs\.weight$/, 'per-dimension RoPE frequency factors (Llama 3.1-style rope scaling)'],
  [/^blk\.\d+\.ffn_(gate|up|down)_exps\.weight$|^blk\.\d+\.ffn_gate_inp\.weight$/, 'mixture-of-experts layers'],
  [/^blk\.\d+\.attn_(q|k)_norm\.weight$/, 'Q/K normalisation (a Qwen3-style layer)'],
];

export function architectureOf(meta: GgufMetadata, source: string): Architecture {
  const arch = meta.string('general.architecture');
  if (!(ARCHITECTURES as readonly string[]).includes(arch))
    throw new UnsupportedModelError(
      `${source}: architecture ${JSON.stringify(arch)} is not supported (supported: ${ARCHITECTURES.join(', ')})`,
    );
  return arch as Architecture;
}

/** The model's hyperparameters from `<arch>.*` metadata and the tensors' shapes. */
export function modelShape(meta: GgufMetadata, tensors: readonly GgufTensorInfo[], source: string): ModelShape {
  const architecture = architectureOf(meta, source);
  const k = (key: string) => `${architecture}.${key}`;
  const fail: (msg: string) => never = (msg) => {
    throw new UnsupportedModelError(`${source}: ${msg}`);
  };
  const experts = meta.int(k('expert_count'), 'optional') ?? 0;
  if (experts > 0) fail(`a mixture-of-experts model (${k('expert_count')} = ${experts}) is not supported`);
  const hiddenSize = meta.int(k('embedding_length'));
  const numLayers = meta.int(k('block_count'));
  const numHeads = meta.int(k('attention.head_count'));
  const numKvHeads = meta.int(k('attention.head_count_kv'), 'optional') ?? numHeads;
  const intermediateSize = meta.int(k('feed_forward_length'));
  for (const [name, v] of Object.entries({ hiddenSize, numLayers, numHeads, numKvHeads, intermediateSize }))
    if (v <= 0) throw new GgufError(`${source}: ${name} must be positive, got ${v}`);
  if (numHeads % numKvHeads !== 0) fail(`${numHeads} attention heads are not a multiple of ${numKvHeads} key/value heads`);
  const keyLength = meta.int(k('attention.key_length'), 'optional');
  if (keyLength === undefined && hiddenSize % numHeads !== 0)
    fail(`embedding_length ${hiddenSize} is not divisible by ${numHeads} heads and attention.key_length is absent`);
  const headDim = keyLength ?? hiddenSize / numHeads;
  const valueLength = meta.int(k('attention.value_length'), 'optional') ?? headDim;
  if (valueLength !== headDim) fail(`attention.value_length ${valueLength} differs from key_length ${headDim}`);
  const ropeDims = meta.int(k('rope.dimension_count'), 'optional') ?? headDim;
  if (ropeDims !== headDim) fail(`partial rotary embeddings (rope.dimension_count ${ropeDims} of head dim ${headDim}) are not supported`);
  if (headDim % 2 !== 0) fail(`head dim ${headDim} is odd (RoPE needs pairs)`);

  const embed = tensors.find((t) => t.name === 'token_embd.weight') ?? fail('no token_embd.weight tensor');
  if (embed.dims.length !== 2 || embed.dims[0] !== hiddenSize)
    fail(`token_embd.weight has ne [${embed.dims.join(', ')}], expected [${hiddenSize}, vocab]`);
  const vocabSize = embed.dims[1];
  const declaredVocab = meta.int(k('vocab_size'), 'optional');
  if (declaredVocab !== undefined && declaredVocab !== vocabSize)
    fail(`${k('vocab_size')} is ${declaredVocab} but token_embd.weight has ${vocabSize} rows`);

  let ropeScaling: ModelShape['ropeScaling'] = null;
  const scalingType = meta.string(k('rope.scaling.type'), 'optional');
  const linearFactor = meta.float(k('rope.scale_linear'), 'optional'); // the older key
  if (scalingType === 'linear' || (scalingType === undefined && linearFactor !== undefined)) {
    const factor = meta.float(k('rope.scaling.factor'), 'optional') ?? linearFactor;
    if (factor === undefined || !(factor > 0)) fail('linear RoPE scaling without a positive factor');
    if (factor !== 1) ropeScaling = { rope_type: 'linear', factor };
  } else if (scalingType !== undefined && scalingType !== 'none') {
    fail(`RoPE scaling ${JSON.stringify(scalingType)} is not supported (supported: none, linear)`);
  }

  const ropeTheta = meta.float(k('rope.freq_base'), 'optional') ?? 10000;
  const rmsNormEps = meta.float(k('attention.layer_norm_rms_epsilon'));
  const maxPositionEmbeddings = meta.int(k('context_length'));
  const hasBias = tensors.some((t) => t.name === 'blk.0.attn_q.bias');
  if (architecture === 'qwen2' && !hasBias) fail('a qwen2 model without attn_q/k/v biases');
  return {
    architecture,
    vocabSize,
    hiddenSize,
    intermediateSize,
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    ropeTheta,
    rmsNormEps,
    maxPositionEmbeddings,
    ropeScaling,
    attentionBias: hasBias,
    tieWordEmbeddings: !tensors.some((t) => t.name === 'output.weight'),
  };
}

/**
 * Every tensor of the file with its transformers name and shape, in transformers' state-dict
 * order; a missing, unexpected or misshapen tensor is an error naming it.
 */
export function planTensors(shape: ModelShape, tensors: readonly GgufTensorInfo[], source: string): TensorPlan[] {
  const { hiddenSize: h, intermediateSize: ff, vocabSize: v, numHeads, numKvHeads, headDim } = shape;
  const q = numHeads * headDim;
  const kv = numKvHeads * headDim;
  const expected: Array<[string, string, number[], number?]> = [['token_embd.weight', 'model.embed_tokens.weight', [v, h]]];
  // llama.cpp reorders each head's Q and K rows for its RoPE layout; only for Llama (convert_hf_to_gguf.py LlamaModel.permute).
  const permuted = shape.architecture === 'llama';
  for (let i = 0; i < shape.numLayers; i++) {
    const shapes: Record<string, number[]> = {
      'attn_norm.weight': [h],
      'attn_q.weight': [q, h],
      'attn_k.weight': [kv, h],
      'attn_v.weight': [kv, h],
      'attn_output.weight': [h, q],
      'ffn_norm.weight': [h],
      'ffn_gate.weight': [ff, h],
      'ffn_up.weight': [ff, h],
      'ffn_down.weight': [h, ff],
      'attn_q.bias': [q],
      'attn_k.bias': [kv],
      'attn_v.bias': [kv],
    };
    const heads: Record<string, number> = { attn_q: numHeads, attn_k: numKvHeads };
    for (const [g, hf] of shape.attentionBias ? [...LAYER_TENSORS, ...BIAS_TENSORS] : LAYER_TENSORS) {
      const proj = g.split('.')[0];
      expected.push([`blk.${i}.${g}`, `model.layers.${i}.${hf}`, shapes[g], permuted ? heads[proj] : undefined]);
    }
  }
  expected.push(['output_norm.weight', 'model.norm.weight', [h]]);
  if (!shape.tieWordEmbeddings) expected.push(['output.weight', 'lm_head.weight', [v, h]]);

  const byName = new Map(tensors.map((t) => [t.name, t]));
  const known = new Set(expected.map((e) => e[0]));
  for (const t of tensors) {
    if (known.has(t.name)) continue;
    const why = UNSUPPORTED_TENSORS.find(([re]) => re.test(t.name));
    throw new UnsupportedModelError(
      why
        ? `${source}: tensor ${t.name} holds ${why[1]}, which is not supported`
        : `${source}: unexpected tensor ${t.name} (not part of a ${shape.architecture} model with ${shape.numLayers} layers)`,
    );
  }
  const missing = expected.filter(([g]) => !byName.has(g)).map(([g]) => g);
  if (missing.length)
    throw new UnsupportedModelError(`${source}: missing tensors: ${missing.slice(0, 8).join(', ')}${missing.length > 8 ? ', ...' : ''}`);
  return expected.map(([g, hfName, want, heads]) => {
    const t = byName.get(g) as GgufTensorInfo; // present: checked above
    const got = [...t.dims].reverse();
    if (got.length !== want.length || got.some((d, i) => d !== want[i]))
      throw new UnsupportedModelError(
        `${source}: tensor ${g} has shape [${got.join(', ')}] (PyTorch order), expected [${want.join(', ')}]`,
      );
    return heads === undefined ? { gguf: t, hfName, shape: want } : { gguf: t, hfName, shape: want, unpermuteHeads: heads };
  });
}

/**
 * Undoes convert_hf_to_gguf.py's `permute` of a Q or K projection (rows = heads × headDim, any
 * number of columns; a bias is one column). llama.cpp interleaves each head's two RoPE halves:
 *   permute(w) = w.reshape(heads, 2, headDim/2, cols).swapaxes(1, 2).reshape(rows, cols)
 * so its row h·headDim + 2j + s holds transformers' row h·headDim + s·headDim/2 + j.
 */
export function unpermuteRows(data: Float32Array, heads: number, cols: number): Float32Array {
  const rows = data.length / cols;
  if (!Number.isInteger(rows) || rows % (2 * heads) !== 0)
    throw new UnsupportedModelError(`cannot undo the Q/K permutation: ${rows} rows are not ${heads} heads of an even size`);
  const headDim = rows / heads;
  const half = headDim / 2;
  const out = new Float32Array(data.length);
  for (let h = 0; h < heads; h++)
    for (let j = 0; j < half; j++)
      for (let s = 0; s < 2; s++) {
        const from = (h * headDim + 2 * j + s) * cols;
        const to = (h * headDim + s * half + j) * cols;
        out.set(data.subarray(from, from + cols), to);
      }
  return out;
}

/** transformers' config.json for the model (LlamaForCausalLM / Qwen2ForCausalLM). */
export function hfConfigJson(
  s: ModelShape,
  tokens: { bos?: number; eos?: number; pad?: number },
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  const out: Record<string, unknown> = {
    architectures: [s.architecture === 'qwen2' ? 'Qwen2ForCausalLM' : 'LlamaForCausalLM'],
    model_type: s.architecture,
    vocab_size: s.vocabSize,
    hidden_size: s.hiddenSize,
    intermediate_size: s.intermediateSize,
    num_hidden_layers: s.numLayers,
    num_attention_heads: s.numHeads,
    num_key_value_heads: s.numKvHeads,
    head_dim: s.headDim,
    hidden_act: 'silu',
    max_position_embeddings: s.maxPositionEmbeddings,
    rms_norm_eps: s.rmsNormEps,
    rope_theta: s.ropeTheta,
    rope_scaling: s.ropeScaling,
    tie_word_embeddings: s.tieWordEmbeddings,
    attention_dropout: 0,
    initializer_range: 0.02,
    use_cache: true,
    torch_dtype: 'float32',
  };
  if (s.architecture === 'llama') Object.assign(out, { attention_bias: s.attentionBias, mlp_bias: false, pretraining_tp: 1 });
  else Object.assign(out, { use_sliding_window: false, sliding_window: null });
  if (tokens.bos !== undefined) out.bos_token_id = tokens.bos;
  if (tokens.eos !== undefined) out.eos_token_id = tokens.eos;
  if (tokens.pad !== undefined) out.pad_token_id = tokens.pad;
  return { ...out, ...extra };
}
