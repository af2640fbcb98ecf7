// LoRA configuration: validation against a model's shape, and PEFT's adapter_config.json both ways
// (https://github.com/huggingface/peft, LoraConfig). The engine adapts the attention and MLP
// projections of every decoder layer: y = W x + (alpha / r) * B (A dropout(x)).
import type { ModelConfig } from './config';

/** Modules a LoRA adapter may target, by their transformers / PEFT names. */
export const LORA_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
export type LoraTarget = (typeof LORA_TARGETS)[number];

export interface LoraOptions {
  /** r: 1 <= rank <= min(in, out) of every targeted projection. */
  rank: number;
  /** The update is scaled by alpha / rank; alpha > 0. */
  alpha: number;
  /** Dropout probability on the adapters' input in training forwards, in [0, 1). Default 0. */
  dropout?: number;
  /** Projections to adapt (LORA_TARGETS names), in every decoder layer. */
  targets: readonly string[];
  /** Seeds A's initialisation and the dropout masks. Default 0. */
  seed?: number;
}

/** A validated LoRA configuration (targets deduplicated, in LORA_TARGETS order). */
export interface LoraConfig {
  rank: number;
  alpha: number;
  dropout: number;
  targets: LoraTarget[];
  seed: number;
}

export class LoraConfigError extends Error {
  override name = 'LoraConfigError';
}

/** In / out features of a targeted projection of this model. */
export function loraTargetShape(c: ModelConfig, t: LoraTarget): { in: number; out: number } {
  const HD = c.numAttentionHeads * c.headDim,
    KVD = c.numKeyValueHeads * c.headDim;
  switch (t) {
    case 'q_proj':
      return { in: c.hiddenSize, out: HD };
    case 'k_proj':
    case 'v_proj':
      return { in: c.hiddenSize, out: KVD };
    case 'o_proj':
      return { in: HD, out: c.hiddenSize };
    case 'gate_proj':
    case 'up_proj':
      return { in: c.hiddenSize, out: c.intermediateSize };
    case 'down_proj':
      return { in: c.intermediateSize, out: c.hiddenSize };
  }
}

/** Checks LoRA options against a model's shape; every problem is reported at once. */
export function normalizeLoraOptions(o: LoraOptions, model: ModelConfig): LoraConfig {
  const errors: string[] = [];
  if (typeof o !== 'object' || o === null) throw new LoraConfigError('LoRA: options must be an object');
  const targets: LoraTarget[] = [];
  if (!Array.isArray(o.targets) || o.targets.length === 0)
    errors.push(`targets must be a non-empty array of module names (${LORA_TARGETS.join(', ')})`);
  else
    for (const t of o.targets) {
      if (!(LORA_TARGETS as readonly string[]).includes(t))
        errors.push(`the model has no module named ${JSON.stringify(t)} to adapt (it has ${LORA_TARGETS.join(', ')})`);
      else if (!targets.includes(t as LoraTarget)) targets.push(t as LoraTarget);
    }
  targets.sort((a, b) => LORA_TARGETS.indexOf(a) - LORA_TARGETS.indexOf(b));
  const rank = o.rank;
  if (!Number.isInteger(rank)) errors.push(`rank must be an integer, got ${JSON.stringify(rank)}`);
  else
    for (const t of targets) {
      const s = loraTargetShape(model, t);
      const max = Math.min(s.in, s.out);
      if (rank < 1 || rank > max)
        errors.push(`rank ${rank} is out of range for ${t} (${s.in} -> ${s.out} features): it must be in [1, ${max}]`);
    }
  if (typeof o.alpha !== 'number' || !Number.isFinite(o.alpha) || !(o.alpha > 0))
    errors.push(`alpha must be a finite number > 0, got ${JSON.stringify(o.alpha)}`);
  const dropout = o.dropout ?? 0;
  if (typeof dropout !== 'number' || !(dropout >= 0 && dropout < 1))
    errors.push(`dropout must be in [0, 1), got ${JSON.stringify(o.dropout)}`);
  const seed = o.seed ?? 0;
  if (!Number.isSafeInteger(seed) || seed < 0) errors.push(`seed must be a non-negative integer, got ${JSON.stringify(o.seed)}`);
  if (errors.length) throw new LoraConfigError(`LoRA: ${errors.join('; ')}`);
  return { rank, alpha: o.alpha, dropout, targets, seed };
}

/** The adapter tensor names PEFT writes for this config, per layer and target (A [r, in] then B [out, r]). */
export function peftTensorName(layer: number, t: LoraTarget, which: 'A' | 'B'): string {
  const part = t === 'q_proj' || t === 'k_proj' || t === 'v_proj' || t === 'o_proj' ? 'self_attn' : 'mlp';
  return `base_model.model.model.layers.${layer}.${part}.${t}.lora_${which}.weight`;
}

/** adapter_config.json as PEFT's LoraConfig.save_pretrained writes it. */
export function peftAdapterConfig(c: LoraConfig, baseModelNameOrPath: string | null): Record<string, unknown> {
  return {
    alpha_pattern: {},
    auto_mapping: null,
    base_model_name_or_path: baseModelNameOrPath,
    bias: 'none',
    fan_in_fan_out: false,
    inference_mode: true,
    init_lora_weights: true,
    layers_pattern: null,
    layers_to_transform: null,
    lora_alpha: c.alpha,
    lora_dropout: c.dropout,
    modules_to_save: null,
    peft_type: 'LORA',
    r: c.rank,
    rank_pattern: {},
    revision: null,
    target_modules: [...c.targets],
    task_type: 'CAUSAL_LM',
    use_dora: false,
    use_rslora: false,
  };
}

/**
 * Reads a PEFT adapter_config.json into a LoraConfig. Rejects what the engine cannot apply exactly
 * (another PEFT method, DoRA, rsLoRA, per-module ranks, biases, a subset of layers, extra trained
 * modules, a target_modules regex) instead of applying something else.
 */
export function parsePeftAdapterConfig(
  raw: unknown,
  source: string,
  model: ModelConfig,
): LoraConfig & { baseModelNameOrPath: string | null } {
  const fail = (msg: string): never => {
    throw new LoraConfigError(`${source}: ${msg}`);
  };
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) fail('must be a JSON object');
  const j = raw as Record<string, unknown>;
  if (j.peft_type !== 'LORA') fail(`peft_type must be "LORA", got ${JSON.stringify(j.peft_type)}`);
  if (j.task_type !== undefined && j.task_type !== null && j.task_type !== 'CAUSAL_LM')
    fail(`task_type must be "CAUSAL_LM", got ${JSON.stringify(j.task_type)}`);
  if ((j.bias ?? 'none') !== 'none') fail(`bias ${JSON.stringify(j.bias)} is not supported (only "none")`);
  for (const k of ['use_dora', 'use_rslora', 'fan_in_fan_out'])
    if (j[k] !== undefined && j[k] !== false) fail(`${k} = ${JSON.stringify(j[k])} is not supported`);
  for (const k of ['rank_pattern', 'alpha_pattern'])
    if (j[k] !== undefined && j[k] !== null && Object.keys(j[k] as object).length > 0)
      fail(`${k} (per-module ranks or alphas) is not supported`);
  for (const k of ['layers_to_transform', 'modules_to_save'])
    if (j[k] !== undefined && j[k] !== null) fail(`${k} is not supported (adapters cover every layer and train nothing else)`);
  const tm = j.target_modules;
  if (!Array.isArray(tm)) fail(`target_modules must be a list of module names, got ${JSON.stringify(tm)}`);
  const base = j.base_model_name_or_path;
  try {
    const cfg = normalizeLoraOptions(
      { rank: j.r as number, alpha: j.lora_alpha as number, dropout: (j.lora_dropout ?? 0) as number, targets: tm as string[] },
      model,
    );
    return { ...cfg, baseModelNameOrPath: typeof base === 'string' ? base : null };
  } catch (e) {
    return fail((e as Error).message);
  }
}
