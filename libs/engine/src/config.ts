// Hugging Face config.json for the Llama / Qwen2 family: strict parsing into a normalised
// ModelConfig, the RoPE inverse frequencies (with rope_scaling), and serialisation back.

export type ModelType = 'llama' | 'qwen2';

export type RopeScaling =
  | { type: 'linear'; factor: number }
  | {
      type: 'llama3';
      factor: number;
      lowFreqFactor: number;
      highFreqFactor: number;
      originalMaxPositionEmbeddings: number;
    };

export interface ModelConfig {
  modelType: ModelType;
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numHiddenLayers: number;
  numAttentionHeads: number;
  numKeyValueHeads: number;
  headDim: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling: RopeScaling | null;
  /** q/k/v projections carry a bias (Qwen2 always; Llama when attention_bias is true). */
  attentionBias: boolean;
  tieWordEmbeddings: boolean;
  maxPositionEmbeddings: number;
  bosTokenId?: number;
  eosTokenId?: number | number[];
}

/** Fields one may give to create a model; the rest default as transformers' config classes do. */
export type ModelConfigInput = Partial<ModelConfig> &
  Pick<ModelConfig, 'vocabSize' | 'hiddenSize' | 'intermediateSize' | 'numHiddenLayers' | 'numAttentionHeads'>;

export class ConfigError extends Error {
  override name = 'ConfigError';
}

function posInt(v: unknown, key: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0)
    throw new ConfigError(`config.json: ${key} must be a positive integer, got ${JSON.stringify(v)}`);
  return v;
}

function posNum(v: unknown, key: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0)
    throw new ConfigError(`config.json: ${key} must be a positive number, got ${JSON.stringify(v)}`);
  return v;
}

/** Completes and validates a config (shared by parseHfConfig and Model.create). */
export function normalizeConfig(c: ModelConfigInput): ModelConfig {
  const modelType = c.modelType ?? 'llama';
  if (modelType !== 'llama' && modelType !== 'qwen2')
    throw new ConfigError(`model type must be "llama" or "qwen2", got ${JSON.stringify(modelType)}`);
  const heads = posInt(c.numAttentionHeads, 'num_attention_heads');
  const hidden = posInt(c.hiddenSize, 'hidden_size');
  const kv = posInt(c.numKeyValueHeads ?? heads, 'num_key_value_heads');
  if (heads % kv !== 0) throw new ConfigError(`num_attention_heads (${heads}) must be a multiple of num_key_value_heads (${kv})`);
  if (c.headDim === undefined && hidden % heads !== 0)
    throw new ConfigError(`hidden_size (${hidden}) must be divisible by num_attention_heads (${heads}) when head_dim is absent`);
  const headDim = posInt(c.headDim ?? hidden / heads, 'head_dim');
  if (headDim % 2 !== 0) throw new ConfigError(`head_dim must be even for RoPE, got ${headDim}`);
  const cfg: ModelConfig = {
    modelType,
    vocabSize: posInt(c.vocabSize, 'vocab_size'),
    hiddenSize: hidden,
    intermediateSize: posInt(c.intermediateSize, 'intermediate_size'),
    numHiddenLayers: posInt(c.numHiddenLayers, 'num_hidden_layers'),
    numAttentionHeads: heads,
    numKeyValueHeads: kv,
    headDim,
    rmsNormEps: posNum(c.rmsNormEps ?? 1e-6, 'rms_norm_eps'),
    ropeTheta: posNum(c.ropeTheta ?? 10000, 'rope_theta'),
    ropeScaling: c.ropeScaling ?? null,
    attentionBias: c.attentionBias ?? modelType === 'qwen2',
    tieWordEmbeddings: c.tieWordEmbeddings ?? false,
    maxPositionEmbeddings: posInt(c.maxPositionEmbeddings ?? 4096, 'max_position_embeddings'),
  };
  if (c.bosTokenId !== undefined) cfg.bosTokenId = c.bosTokenId;
  if (c.eosTokenId !== undefined) cfg.eosTokenId = c.eosTokenId;
  if (cfg.modelType === 'qwen2' && !cfg.attentionBias)
    throw new ConfigError('qwen2 models always have q/k/v biases (attention_bias cannot be false)');
  if (cfg.ropeScaling) validateRopeScaling(cfg.ropeScaling);
  return cfg;
}

function validateRopeScaling(r: RopeScaling): void {
  posNum(r.factor, 'rope_scaling.factor');
  if (r.type === 'llama3') {
    posNum(r.lowFreqFactor, 'rope_scaling.low_freq_factor');
    posNum(r.highFreqFactor, 'rope_scaling.high_freq_factor');
    posNum(r.originalMaxPositionEmbeddings, 'rope_scaling.original_max_position_embeddings');
    if (r.highFreqFactor <= r.lowFreqFactor) throw new ConfigError('rope_scaling: high_freq_factor must be greater than low_freq_factor');
  } else if (r.type !== 'linear') {
    throw new ConfigError(`rope_scaling type ${JSON.stringify((r as { type: unknown }).type)} is not supported`);
  }
}

function parseRopeScaling(raw: unknown): RopeScaling | null {
  if (raw === null || raw === undefined) return null;
  if (typeof raw !== 'object') throw new ConfigError('config.json: rope_scaling must be an object or null');
  const r = raw as Record<string, unknown>;
  const type = r.rope_type ?? r.type;
  if (type === 'default' || type === undefined) return null;
  if (type === 'linear') return { type: 'linear', factor: posNum(r.factor, 'rope_scaling.factor') };
  if (type === 'llama3')
    return {
      type: 'llama3',
      factor: posNum(r.factor, 'rope_scaling.factor'),
      lowFreqFactor: posNum(r.low_freq_factor, 'rope_scaling.low_freq_factor'),
      highFreqFactor: posNum(r.high_freq_factor, 'rope_scaling.high_freq_factor'),
      originalMaxPositionEmbeddings: posInt(r.original_max_position_embeddings, 'rope_scaling.original_max_position_embeddings'),
    };
  throw new ConfigError(`config.json: rope_scaling type ${JSON.stringify(type)} is not supported (supported: default, linear, llama3)`);
}

/** Parses a transformers config.json (LlamaForCausalLM / Qwen2ForCausalLM) strictly. */
export function parseHfConfig(json: unknown): ModelConfig {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new ConfigError('config.json must be an object');
  const j = json as Record<string, unknown>;
  const modelType = j.model_type;
  if (modelType !== 'llama' && modelType !== 'qwen2')
    throw new ConfigError(`config.json: model_type must be "llama" or "qwen2", got ${JSON.stringify(modelType)}`);
  const act = j.hidden_act ?? 'silu';
  if (act !== 'silu') throw new ConfigError(`config.json: hidden_act must be "silu", got ${JSON.stringify(act)}`);
  if (j.mlp_bias === true) throw new ConfigError('config.json: mlp_bias = true is not supported');
  if (j.use_sliding_window === true) throw new ConfigError('config.json: use_sliding_window = true is not supported');
  // transformers >= 5 nests RoPE settings in rope_parameters
  const rp = (typeof j.rope_parameters === 'object' && j.rope_parameters !== null ? j.rope_parameters : undefined) as
    Record<string, unknown> | undefined;
  const ropeTheta = (rp?.rope_theta ?? j.rope_theta ?? 10000) as number;
  const ropeScaling = parseRopeScaling(j.rope_scaling ?? rp);
  if (modelType === 'llama' && j.attention_bias !== undefined && typeof j.attention_bias !== 'boolean')
    throw new ConfigError('config.json: attention_bias must be a boolean');
  if (j.tie_word_embeddings !== undefined && typeof j.tie_word_embeddings !== 'boolean')
    throw new ConfigError('config.json: tie_word_embeddings must be a boolean');
  return normalizeConfig({
    modelType,
    vocabSize: j.vocab_size as number,
    hiddenSize: j.hidden_size as number,
    intermediateSize: j.intermediate_size as number,
    numHiddenLayers: j.num_hidden_layers as number,
    numAttentionHeads: j.num_attention_heads as number,
    numKeyValueHeads: (j.num_key_value_heads ?? j.num_attention_heads) as number,
    headDim: (j.head_dim ?? undefined) as number | undefined,
    rmsNormEps: (j.rms_norm_eps ?? 1e-6) as number,
    ropeTheta,
    ropeScaling,
    attentionBias: modelType === 'qwen2' ? true : ((j.attention_bias as boolean | undefined) ?? false),
    tieWordEmbeddings: (j.tie_word_embeddings as boolean | undefined) ?? false,
    maxPositionEmbeddings: (j.max_position_embeddings ?? 4096) as number,
    bosTokenId: typeof j.bos_token_id === 'number' ? j.bos_token_id : undefined,
    eosTokenId: typeof j.eos_token_id === 'number' || Array.isArray(j.eos_token_id) ? (j.eos_token_id as number) : undefined,
  });
}

/** The config.json transformers writes for this model (extra keys of a loaded config are kept). */
export function toHfConfig(c: ModelConfig, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const rope =
    c.ropeScaling === null
      ? null
      : c.ropeScaling.type === 'linear'
        ? { rope_type: 'linear', factor: c.ropeScaling.factor }
        : {
            rope_type: 'llama3',
            factor: c.ropeScaling.factor,
            low_freq_factor: c.ropeScaling.lowFreqFactor,
            high_freq_factor: c.ropeScaling.highFreqFactor,
            original_max_position_embeddings: c.ropeScaling.originalMaxPositionEmbeddings,
          };
  const out: Record<string, unknown> = {
    ...extra,
    architectures: [c.modelType === 'qwen2' ? 'Qwen2ForCausalLM' : 'LlamaForCausalLM'],
    model_type: c.modelType,
    vocab_size: c.vocabSize,
    hidden_size: c.hiddenSize,
    intermediate_size: c.intermediateSize,
    num_hidden_layers: c.numHiddenLayers,
    num_attention_heads: c.numAttentionHeads,
    num_key_value_heads: c.numKeyValueHeads,
    head_dim: c.headDim,
    hidden_act: 'silu',
    rms_norm_eps: c.rmsNormEps,
    rope_theta: c.ropeTheta,
    rope_scaling: rope,
    tie_word_embeddings: c.tieWordEmbeddings,
    max_position_embeddings: c.maxPositionEmbeddings,
    torch_dtype: 'float32',
  };
  delete out.rope_parameters;
  if (c.modelType === 'llama') {
    out.attention_bias = c.attentionBias;
    out.mlp_bias = false;
  }
  if (c.bosTokenId !== undefined) out.bos_token_id = c.bosTokenId;
  if (c.eosTokenId !== undefined) out.eos_token_id = c.eosTokenId;
  return out;
}

/**
 * RoPE inverse frequencies [headDim/2] as transformers computes them
 * (inv_freq = 1 / theta^(2i/d), then rope_scaling: "linear" divides by factor, "llama3"
 * rescales long wavelengths and smooths the band in between). Returned as float32.
 */
export function ropeInvFreq(c: ModelConfig): Float32Array {
  const d = c.headDim;
  const half = d / 2;
  const out = new Float32Array(half);
  for (let i = 0; i < half; i++) out[i] = 1 / Math.pow(c.ropeTheta, (2 * i) / d);
  const r = c.ropeScaling;
  if (r?.type === 'linear') {
    for (let i = 0; i < half; i++) out[i] = out[i] / r.factor;
  } else if (r?.type === 'llama3') {
    const lowWavelen = r.originalMaxPositionEmbeddings / r.lowFreqFactor;
    const highWavelen = r.originalMaxPositionEmbeddings / r.highFreqFactor;
    for (let i = 0; i < half; i++) {
      const f = out[i];
      const wavelen = (2 * Math.PI) / f;
      let g = wavelen > lowWavelen ? f / r.factor : f;
      const smooth = (r.originalMaxPositionEmbeddings / wavelen - r.lowFreqFactor) / (r.highFreqFactor - r.lowFreqFactor);
      const medium = !(wavelen < highWavelen) && !(wavelen > lowWavelen);
      if (medium) g = ((1 - smooth) * g) / r.factor + smooth * g;
      out[i] = g;
    }
  }
  return out;
}

/**
 * The vocabulary of the built-in tiny model: the built-in byte-level tokenizer's
 * (libs/tokenizer BYTE_VOCAB_SIZE: 256 bytes + 16 added tokens), so every id it samples decodes.
 * The gateway refuses a served model whose vocabulary differs from its tokenizer's.
 */
export const TINY_VOCAB_SIZE = 272;

/** A ~0.9M-parameter Llama-style config for tests, examples and the embedded default, over the byte tokenizer's vocabulary. */
export function tinyConfig(overrides: Partial<ModelConfig> = {}): ModelConfig {
  return normalizeConfig({
    modelType: 'llama',
    vocabSize: TINY_VOCAB_SIZE,
    hiddenSize: 128,
    intermediateSize: 384,
    numHiddenLayers: 4,
    numAttentionHeads: 4,
    numKeyValueHeads: 2,
    maxPositionEmbeddings: 8192,
    ropeTheta: 10000,
    ...overrides,
  });
}
