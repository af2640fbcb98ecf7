// LoRA adapters on disk in PEFT's layout, which Hugging Face PEFT loads (PeftModel.from_pretrained):
//   adapter_config.json          LoraConfig (peft_type LORA, r, lora_alpha, lora_dropout, target_modules, ...)
//   adapter_model.safetensors    base_model.model.model.layers.{i}.{self_attn|mlp}.{module}.lora_A.weight [r, in]
//                                and .lora_B.weight [out, r], F32; its __metadata__ (which PEFT ignores) records
//                                the base the adapter was trained on: its shape and a fingerprint of its weights
//   adapter_optimizer.safetensors AdamW's moments of the adapters and the step (optional; resume only)
// Reading checks everything before anything is applied: a bad file changes nothing.
import { createHash } from 'node:crypto';
import { existsSync, promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { ModelConfig } from './config';
import { LoraConfig, LoraConfigError, loraTargetShape, parsePeftAdapterConfig, peftAdapterConfig, peftTensorName } from './lora';
import { parseSafetensors, toFloat32, writeSafetensors } from './safetensors';

export const ADAPTER_CONFIG_FILE = 'adapter_config.json';
export const ADAPTER_WEIGHTS_FILE = 'adapter_model.safetensors';
export const ADAPTER_OPTIMIZER_FILE = 'adapter_optimizer.safetensors';

const META_BASE_SHAPE = 'anvil.base_shape';
const META_BASE_FINGERPRINT = 'anvil.base_fingerprint';

export class LoraAdapterError extends Error {
  override name = 'LoraAdapterError';
}

/** The base-model shape an adapter records (and is checked against when loaded). */
export function baseShapeOf(c: ModelConfig): Record<string, number | string> {
  return {
    model_type: c.modelType,
    vocab_size: c.vocabSize,
    hidden_size: c.hiddenSize,
    intermediate_size: c.intermediateSize,
    num_hidden_layers: c.numHiddenLayers,
    num_attention_heads: c.numAttentionHeads,
    num_key_value_heads: c.numKeyValueHeads,
    head_dim: c.headDim,
  };
}

/**
 * "sha256:<hex>" over every base tensor (name, shape, float32 bytes, in layout order): the same
 * for the same weights whatever file dtype or sharding they were loaded from.
 */
export function weightsFingerprint(tensors: ReadonlyArray<{ name: string; shape: readonly number[]; data: Float32Array }>): string {
  const h = createHash('sha256');
  for (const t of tensors) {
    h.update(`${t.name}\0${t.shape.join(',')}\0`);
    h.update(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
  }
  return `sha256:${h.digest('hex')}`;
}

export interface AdapterTensor {
  name: string;
  shape: readonly number[];
  data: Float32Array;
}

/** Writes the adapter files into dir (created if needed). */
export async function writeAdapter(
  dir: string,
  a: {
    config: LoraConfig;
    baseModelNameOrPath: string | null;
    base: ModelConfig;
    baseFingerprint: string;
    tensors: readonly AdapterTensor[];
    optimizer?: { step: number; m: Float32Array | null; v: Float32Array | null };
  },
): Promise<void> {
  await fsp.mkdir(dir, { recursive: true });
  await fsp.writeFile(join(dir, ADAPTER_CONFIG_FILE), JSON.stringify(peftAdapterConfig(a.config, a.baseModelNameOrPath), null, 2) + '\n');
  await writeSafetensors(
    join(dir, ADAPTER_WEIGHTS_FILE),
    a.tensors.map((t) => ({ name: t.name, shape: t.shape, dtype: 'F32' as const, data: t.data })),
    { format: 'pt', [META_BASE_SHAPE]: JSON.stringify(baseShapeOf(a.base)), [META_BASE_FINGERPRINT]: a.baseFingerprint },
  );
  if (a.optimizer) {
    const o = a.optimizer;
    const tensors =
      o.m && o.v
        ? [
            { name: 'adam_m', shape: [o.m.length], dtype: 'F32' as const, data: o.m },
            { name: 'adam_v', shape: [o.v.length], dtype: 'F32' as const, data: o.v },
          ]
        : [];
    await writeSafetensors(join(dir, ADAPTER_OPTIMIZER_FILE), tensors, { step: String(o.step), format: 'anvil-adamw/1' });
  }
}

export interface ReadAdapter {
  config: LoraConfig;
  baseModelNameOrPath: string | null;
  /** The fingerprint of the base it was trained on, when the file records one (PEFT's own files do not). */
  baseFingerprint: string | null;
  /** Adapter tensors by PEFT name, as float32 (the file may hold F16 or BF16). */
  tensors: Map<string, Float32Array>;
  /** With readOptimizer: the moments (null before the first step) and the step. */
  optimizer?: { step: number; m: Float32Array | null; v: Float32Array | null };
}

/**
 * Reads and checks an adapter directory against a base model's shape: the config, every expected
 * tensor with its exact shape and nothing else, the recorded base shape, and (with readOptimizer)
 * the optimizer file's sizes. The caller compares baseFingerprint with its own weights.
 */
export async function readAdapter(dir: string, base: ModelConfig, opts: { readOptimizer?: boolean } = {}): Promise<ReadAdapter> {
  const cfgPath = join(dir, ADAPTER_CONFIG_FILE);
  const wPath = join(dir, ADAPTER_WEIGHTS_FILE);
  if (!existsSync(cfgPath)) throw new LoraAdapterError(`${dir}: no ${ADAPTER_CONFIG_FILE} (not a PEFT LoRA adapter directory)`);
  if (!existsSync(wPath)) throw new LoraAdapterError(`${dir}: no ${ADAPTER_WEIGHTS_FILE}`);
  let raw: unknown;
  try {
    raw = JSON.parse(await fsp.readFile(cfgPath, 'utf8'));
  } catch (e) {
    throw new LoraAdapterError(`${cfgPath}: not valid JSON (${(e as Error).message})`);
  }
  let parsed;
  try {
    parsed = parsePeftAdapterConfig(raw, cfgPath, base);
  } catch (e) {
    if (e instanceof LoraConfigError) throw new LoraAdapterError(e.message);
    throw e;
  }
  const { baseModelNameOrPath, ...config } = parsed;
  const st = parseSafetensors(await fsp.readFile(wPath), wPath);
  const recordedShape = st.metadata[META_BASE_SHAPE];
  if (recordedShape !== undefined) {
    const mine = JSON.stringify(baseShapeOf(base));
    if (recordedShape !== mine)
      throw new LoraAdapterError(`${wPath}: the adapter was trained on a base of shape ${recordedShape}, but this model is ${mine}`);
  }
  const tensors = new Map<string, Float32Array>();
  const expected = new Set<string>();
  for (let l = 0; l < base.numHiddenLayers; l++)
    for (const t of config.targets) {
      const s = loraTargetShape(base, t);
      for (const [which, shape] of [
        ['A', [config.rank, s.in]],
        ['B', [s.out, config.rank]],
      ] as const) {
        const name = peftTensorName(l, t, which);
        expected.add(name);
        const f = st.tensors.get(name);
        if (!f) throw new LoraAdapterError(`${wPath}: tensor ${name} is missing (the config adapts ${t} in every layer)`);
        if (f.shape.length !== 2 || f.shape[0] !== shape[0] || f.shape[1] !== shape[1])
          throw new LoraAdapterError(
            `${wPath}: tensor ${name} has shape [${f.shape.join(', ')}], expected [${shape.join(', ')}] for this base model and r = ${config.rank}`,
          );
        const data = new Float32Array(shape[0] * shape[1]);
        toFloat32(f, data, `${wPath}: ${name}`);
        tensors.set(name, data);
      }
    }
  const extra = [...st.tensors.keys()].filter((n) => !expected.has(n));
  if (extra.length)
    throw new LoraAdapterError(
      `${wPath}: unexpected tensors ${extra.slice(0, 4).join(', ')}${extra.length > 4 ? ', ...' : ''} (not LoRA A/B weights of this model's layers and the config's targets)`,
    );
  const out: ReadAdapter = { config, baseModelNameOrPath, baseFingerprint: st.metadata[META_BASE_FINGERPRINT] ?? null, tensors };
  if (opts.readOptimizer) {
    const oPath = join(dir, ADAPTER_OPTIMIZER_FILE);
    if (!existsSync(oPath))
      throw new LoraAdapterError(`${dir}: no ${ADAPTER_OPTIMIZER_FILE} (the adapter was saved without its optimizer state)`);
    const os = parseSafetensors(await fsp.readFile(oPath), oPath);
    const step = Number(os.metadata.step ?? NaN);
    if (!Number.isInteger(step) || step < 0) throw new LoraAdapterError(`${oPath}: no valid step in its metadata`);
    const n = [...tensors.values()].reduce((a, t) => a + t.length, 0);
    const m = os.tensors.get('adam_m'),
      v = os.tensors.get('adam_v');
    if (!m && !v) out.optimizer = { step, m: null, v: null };
    else {
      if (!m || !v || m.dtype !== 'F32' || v.dtype !== 'F32' || m.shape[0] !== n || v.shape[0] !== n || m.shape.length !== 1)
        throw new LoraAdapterError(`${oPath}: adam_m and adam_v must be F32 vectors of ${n} entries (one per adapter parameter)`);
      const mm = new Float32Array(n),
        vv = new Float32Array(n);
      toFloat32(m, mm, `${oPath}: adam_m`);
      toFloat32(v, vv, `${oPath}: adam_v`);
      out.optimizer = { step, m: mm, v: vv };
    }
  }
  return out;
}
