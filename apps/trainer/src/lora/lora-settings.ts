// The trainer's LoRA knobs: rank-r adapters on some projections of every layer with the base
// frozen (TRAINER_LORA_RANK unset: full fine-tuning), and how a version is published: the merged
// weights (a whole model, what any server loads) or the adapter alone (a PEFT directory the
// inference-proxy applies to the base it loaded once).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import {
  LORA_TARGETS,
  LoraConfigError,
  normalizeLoraOptions,
  parseHfConfig,
  tinyConfig,
  type LoraOptions,
  type ModelConfig,
} from '@anvil/engine';

export const PUBLISH_FORMATS = ['merged', 'adapter'] as const;
export type PublishFormat = (typeof PUBLISH_FORMATS)[number];

const blankIsUnset = (v: unknown) => (v === '' ? undefined : v);
const isTarget = (n: unknown) => (LORA_TARGETS as readonly unknown[]).includes(n);

export const loraEnvShape = {
  /** LoRA rank r: adapters on TRAINER_LORA_TARGETS of every layer, the base frozen (AdamW state for the adapters only). Unset: full fine-tuning. */
  TRAINER_LORA_RANK: z.preprocess(
    blankIsUnset,
    z.coerce.number().refine(Number.isInteger, 'must be an integer').pipe(z.number().min(1).max(65_536)).optional(),
  ),
  /** The adapters' update is scaled by alpha / rank; required with TRAINER_LORA_RANK. */
  TRAINER_LORA_ALPHA: z.preprocess(blankIsUnset, z.coerce.number().pipe(z.number().positive().max(1e6)).optional()),
  /** Dropout on the adapters' input in training forwards, in [0, 1). */
  TRAINER_LORA_DROPOUT: z.coerce.number().min(0).lt(1).default(0),
  /** Comma-separated projections to adapt, in every layer; unset: all seven (q, k, v, o, gate, up, down). */
  TRAINER_LORA_TARGETS: z.preprocess(
    (v) => (typeof v === 'string' && v.trim() !== '' ? v.split(',').map((t) => t.trim()) : undefined),
    z
      .array(z.string())
      .superRefine((names, ctx) => {
        const unknown = names.filter((n) => !isTarget(n));
        if (unknown.length)
          ctx.addIssue({
            code: 'custom',
            message: `${unknown.map((n) => JSON.stringify(n)).join(', ')} ${unknown.length > 1 ? 'are not projections' : 'is not a projection'} (${LORA_TARGETS.join(', ')})`,
          });
      })
      .optional(),
  ),
  /** What a published version holds with LoRA: `merged` (the whole model) or `adapter` (a PEFT adapter over TRAINER_INITIAL_CHECKPOINT_DIR). */
  TRAINER_PUBLISH_FORMAT: z.enum(PUBLISH_FORMATS).default('merged'),
};

export interface LoraEnv {
  TRAINER_INITIAL_CHECKPOINT_DIR?: string;
  TRAINER_LORA_RANK?: number;
  TRAINER_LORA_ALPHA?: number;
  TRAINER_LORA_DROPOUT: number;
  TRAINER_LORA_TARGETS?: string[];
  TRAINER_PUBLISH_FORMAT: PublishFormat;
}

/** The adapters the configuration asks for, or null for full fine-tuning (seed 0: A's initialisation is part of the run). */
export function loraOptionsOf(c: LoraEnv): LoraOptions | null {
  if (c.TRAINER_LORA_RANK === undefined) return null;
  return {
    rank: c.TRAINER_LORA_RANK,
    alpha: c.TRAINER_LORA_ALPHA ?? Number.NaN,
    dropout: c.TRAINER_LORA_DROPOUT,
    targets: c.TRAINER_LORA_TARGETS ?? [...LORA_TARGETS],
    seed: 0,
  };
}

/** The starting model's shape: its config.json, or the built-in tiny model's; null when config.json is unreadable (the load reports it). */
function startingShape(dir: string | undefined): ModelConfig | null {
  if (!dir) return tinyConfig();
  try {
    return parseHfConfig(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')));
  } catch {
    return null;
  }
}

/** Whether each LoRA knob parsed on its own (their relations are checked only then, so a bad value is reported once). */
function parsed(c: Record<string, unknown>): c is LoraEnv & Record<string, unknown> {
  const ok = (k: keyof typeof loraEnvShape) => loraEnvShape[k].safeParse(c[k]).success;
  const t = c.TRAINER_LORA_TARGETS;
  return (
    ok('TRAINER_LORA_RANK') &&
    ok('TRAINER_LORA_ALPHA') &&
    ok('TRAINER_LORA_DROPOUT') &&
    (t === undefined || (Array.isArray(t) && t.length > 0 && t.every(isTarget))) &&
    (PUBLISH_FORMATS as readonly unknown[]).includes(c.TRAINER_PUBLISH_FORMAT)
  );
}

/**
 * The problems of the LoRA knobs together, as [variable, message]: the relations between them, and
 * the rank against the starting model's projections (known from its config.json at start, before
 * any weights are read). Nothing when a knob failed on its own.
 */
export function loraProblems(c: Record<string, unknown>): [string, string][] {
  if (!parsed(c)) return [];
  const out: [string, string][] = [];
  const lora = c.TRAINER_LORA_RANK !== undefined;
  if (!lora) {
    for (const k of ['TRAINER_LORA_ALPHA', 'TRAINER_LORA_TARGETS'] as const)
      if (c[k] !== undefined) out.push([k, 'is only used with TRAINER_LORA_RANK (unset: full fine-tuning)']);
    if (c.TRAINER_LORA_DROPOUT > 0) out.push(['TRAINER_LORA_DROPOUT', 'is only used with TRAINER_LORA_RANK (unset: full fine-tuning)']);
    if (c.TRAINER_PUBLISH_FORMAT === 'adapter')
      out.push(['TRAINER_PUBLISH_FORMAT', 'adapter needs LoRA (TRAINER_LORA_RANK): full fine-tuning publishes whole models']);
    return out;
  }
  if (c.TRAINER_LORA_ALPHA === undefined)
    out.push(['TRAINER_LORA_ALPHA', 'is required with TRAINER_LORA_RANK (the update is scaled by alpha / rank)']);
  if (c.TRAINER_PUBLISH_FORMAT === 'adapter' && !c.TRAINER_INITIAL_CHECKPOINT_DIR)
    out.push([
      'TRAINER_PUBLISH_FORMAT',
      'adapter needs TRAINER_INITIAL_CHECKPOINT_DIR: the base directory the inference-proxy applies each adapter to',
    ]);
  const shape = startingShape(c.TRAINER_INITIAL_CHECKPOINT_DIR);
  const options = loraOptionsOf(c);
  if (shape && options && c.TRAINER_LORA_ALPHA !== undefined)
    try {
      normalizeLoraOptions(options, shape);
    } catch (e) {
      if (!(e instanceof LoraConfigError)) throw e;
      out.push(['TRAINER_LORA_RANK', `${e.message.replace(/^LoRA: /, '')} (the starting model's projections)`]);
    }
  return out;
}
