import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { port, serviceBaseEnv } from '@anvil/config';
import { AGGREGATIONS, LOSS_KINDS, LossConfigError, lossConfig, type Aggregation, type LossConfig, type LossKind } from '@anvil/rl';
import { loraEnvShape, loraProblems } from './lora/lora-settings';
import type { TrainerOptions } from './runtime';

// Integers checked with a refinement, not zod's int format: a failed int format aborts the whole
// object's parse, which would keep the relation checks below from running (every problem is listed at once).
const int = (min: number, max: number, fallback: number) =>
  z.coerce.number().refine(Number.isInteger, 'must be an integer').pipe(z.number().min(min).max(max)).default(fallback);
const nonNegativeInt = (fallback: number) => int(0, Number.MAX_SAFE_INTEGER, fallback);
const positiveInt = (fallback: number) => int(1, Number.MAX_SAFE_INTEGER, fallback);
const flag = (fallback: 'true' | 'false') =>
  z
    .enum(['true', 'false'])
    .default(fallback)
    .transform((v) => v === 'true');
const optionalNumber = (schema: z.ZodNumber) => z.preprocess((v) => (v === '' ? undefined : v), z.coerce.number().pipe(schema).optional());

/** The env variable each lossConfig field is set by (a LossConfigError names the field, the operator needs the variable). */
const LOSS_ENV: Record<string, string> = {
  kind: 'TRAINER_LOSS',
  epsLow: 'TRAINER_EPS_LOW',
  epsHigh: 'TRAINER_EPS_HIGH',
  aggregation: 'TRAINER_AGGREGATION',
  constantNormalizer: 'TRAINER_CONSTANT_NORMALIZER',
  correction: 'TRAINER_TOKEN_TIS_CAP',
  'correction.tokenTis': 'TRAINER_TOKEN_TIS_CAP',
  'correction.tokenTis.cap': 'TRAINER_TOKEN_TIS_CAP',
  'correction.seqTis': 'TRAINER_SEQ_TIS_CAP',
  'correction.seqTis.cap': 'TRAINER_SEQ_TIS_CAP',
  klCoef: 'TRAINER_KL_COEF',
  cispoMask: 'TRAINER_CISPO_MASK',
  'cispoMask.epsLow': 'TRAINER_CISPO_MASK',
  'cispoMask.epsHigh': 'TRAINER_CISPO_MASK',
  dualClip: 'TRAINER_DUAL_CLIP',
};

const shape = {
  ...serviceBaseEnv,
  PORT: port(8084),
  HOST: z.string().default('127.0.0.1'),
  /** The run whose batches this trainer trains: the Data Pool's DATA_POOL_RUN_ID. */
  TRAINER_RUN_ID: z.string().min(1).max(128).default('default'),
  /** The starting weights: a Hugging Face model directory (config.json + safetensors). Unset: the built-in tiny model (random init, seed 0), the one the inference-proxy serves without EMBEDDED_CHECKPOINT_DIR. */
  TRAINER_INITIAL_CHECKPOINT_DIR: z.string().min(1).optional(),
  /** Where the model's tokenizer files and chat template are, copied into every published version; unset: TRAINER_INITIAL_CHECKPOINT_DIR (a warm start of a user's model holds only weights). */
  TRAINER_TOKENIZER_DIR: z.string().min(1).optional(),
  /** Where checkpoints (Hugging Face layout, one directory per published version) are written and published from. */
  CHECKPOINT_DIR: z.string({ error: 'is required (a writable directory)' }).min(1, 'is required (a writable directory)'),
  /** Weight-only versions kept on disk (the newest ones; resume points are counted apart). */
  CHECKPOINT_KEEP_PUBLISHED: positiveInt(4),
  /** Full checkpoints (resume points) kept on disk. */
  CHECKPOINT_KEEP_FULL: positiveInt(2),
  TRAINER_LOSS: z.enum(LOSS_KINDS as [LossKind, ...LossKind[]]).default('cispo'),
  /** Clip band [1 − eps_low, 1 + eps_high] of the ratio; unset: the loss's default (CISPO [0, 5], PPO kinds 0.2 / 0.28). */
  TRAINER_EPS_LOW: optionalNumber(z.number().min(0).max(1)),
  TRAINER_EPS_HIGH: optionalNumber(z.number().min(0).max(100)),
  /** CISPO only: MiniMax-M1's token mask, "epsLow,epsHigh" (e.g. 0.2,0.28): no gradient for a token whose ratio left that band in its advantage's direction. Unset: none. */
  TRAINER_CISPO_MASK: z
    .string()
    .regex(/^\s*[0-9.eE+-]+\s*,\s*[0-9.eE+-]+\s*$/, 'must be "epsLow,epsHigh", e.g. 0.2,0.28')
    .transform((v) => {
      const [epsLow, epsHigh] = v.split(',').map(Number);
      return { epsLow, epsHigh };
    })
    .optional(),
  /** PPO kinds only: dual-clip c (> 1; verl and SkyRL use 3): a negative-advantage token whose ratio passed c gets no gradient. Unset: none. */
  TRAINER_DUAL_CLIP: optionalNumber(z.number().gt(1).max(1e6)),
  TRAINER_AGGREGATION: z.enum(AGGREGATIONS as [Aggregation, ...Aggregation[]]).default('token_mean'),
  /** Only with TRAINER_AGGREGATION=constant: the loss is divided by this (Dr. GRPO: max tokens × samples). */
  TRAINER_CONSTANT_NORMALIZER: optionalNumber(z.number().positive()),
  /** Token-level truncated importance sampling cap (reinforce_tis default 2; decoupled_ppo caps π_prox/π_behaviour with it). */
  TRAINER_TOKEN_TIS_CAP: optionalNumber(z.number().positive()),
  /** Sequence-level truncated importance sampling cap (reinforce_tis only). */
  TRAINER_SEQ_TIS_CAP: optionalNumber(z.number().positive()),
  /** β of the KL penalty (k3) to the starting weights, which the trainer then loads twice (0 = none). */
  TRAINER_KL_COEF: z.coerce.number().min(0).max(100).default(0),
  /** AdamW peak learning rate. */
  TRAINER_LR: z.coerce.number().positive().max(1).default(5e-5),
  /** Linear learning-rate warm-up over this many optimizer steps (0 = none). */
  TRAINER_WARMUP_STEPS: int(0, 1_000_000, 10),
  /** Cosine lr decay after the warm-up, to TRAINER_LR_MIN_FACTOR · lr at this optimizer step (0 = constant lr). */
  TRAINER_LR_DECAY_STEPS: int(0, 100_000_000, 0),
  /** Floor of the cosine decay, as a fraction of TRAINER_LR. */
  TRAINER_LR_MIN_FACTOR: z.coerce.number().min(0).max(1).default(0.1),
  /** Global gradient-norm clip (0 = off). */
  TRAINER_MAX_GRAD_NORM: z.coerce.number().min(0).max(1e6).default(1),
  /** Optimizer steps per batch (the batch is split along groups). */
  TRAINER_MINI_BATCHES: int(1, 64, 1),
  TRAINER_ADAM_BETA1: z.coerce.number().min(0).lt(1).default(0.9),
  TRAINER_ADAM_BETA2: z.coerce.number().min(0).lt(1).default(0.95),
  TRAINER_ADAM_EPS: z.coerce.number().positive().max(1).default(1e-15),
  TRAINER_WEIGHT_DECAY: z.coerce.number().min(0).max(1).default(0),
  /** Prefix-tree nodes per pack at most (the engine's forward budget). */
  TRAINER_PACK_TOKENS: int(1, 16_777_216, 65_536),
  /** Publish a new policy version every this many trained batches. */
  TRAINER_PUBLISH_EVERY: positiveInt(1),
  /** Write a full checkpoint (weights + AdamW + data position: a resume point) every this many trained batches. */
  TRAINER_CHECKPOINT_EVERY: positiveInt(20),
  /** Stop training (and report not ready) once more optimizer steps than this were skipped for a non-finite loss or gradient. */
  TRAINER_MAX_NON_FINITE_SKIPS: nonNegativeInt(5),
  /** Policy version of the starting weights (what the inference-proxy serves before the first publish). */
  INITIAL_POLICY_VERSION: nonNegativeInt(0),
  /** Stop consuming after this many trained batches (0 = no limit). */
  TRAINER_MAX_BATCHES: nonNegativeInt(0),
  /** Consumer group of train_batch.created (one trainer per run). */
  TRAINER_CONSUMER_GROUP: z.string().min(1).max(255).default('anvil.trainer'),
  /** Threads of the native engine. */
  ENGINE_THREADS: int(1, 256, 2),
  /** Apply committed migrations (under the shared advisory lock) at start: the Data Pool's batch tables must exist before the trainer reads them. */
  DB_MIGRATE_ON_START: flag('true'),
  ...loraEnvShape,
};

export const trainerEnv = z.object(shape).superRefine(
  (env, ctx) => {
    const dir = env.TRAINER_INITIAL_CHECKPOINT_DIR;
    if (typeof dir === 'string' && dir !== '' && !existsSync(join(dir, 'config.json')))
      ctx.addIssue({
        code: 'custom',
        path: ['TRAINER_INITIAL_CHECKPOINT_DIR'],
        message: 'has no config.json (a Hugging Face model directory: config.json + safetensors)',
      });
    for (const [name, message] of loraProblems(env)) ctx.addIssue({ code: 'custom', path: [name], message });
    // Relations between the loss knobs, exactly as libs/rl refuses them; only once each knob parsed on its own.
    const knobs = [
      'TRAINER_LOSS',
      'TRAINER_EPS_LOW',
      'TRAINER_EPS_HIGH',
      'TRAINER_DUAL_CLIP',
      'TRAINER_AGGREGATION',
      'TRAINER_CONSTANT_NORMALIZER',
      'TRAINER_TOKEN_TIS_CAP',
      'TRAINER_SEQ_TIS_CAP',
    ] as const;
    if (!knobs.every((k) => shape[k].safeParse(env[k]).success)) return;
    if (typeof env.TRAINER_CISPO_MASK === 'string') return; // did not parse (still the raw text)
    if (env.TRAINER_LOSS === 'ppo' && (env.TRAINER_TOKEN_TIS_CAP !== undefined || env.TRAINER_SEQ_TIS_CAP !== undefined))
      ctx.addIssue({
        code: 'custom',
        path: [env.TRAINER_TOKEN_TIS_CAP !== undefined ? 'TRAINER_TOKEN_TIS_CAP' : 'TRAINER_SEQ_TIS_CAP'],
        message:
          'ppo with truncated IS needs a recomputed proximal policy, which the trainer does not compute (both ratios would be π_θ/π_behaviour, counted twice); use decoupled_ppo, whose π_prox/π_behaviour weight TRAINER_TOKEN_TIS_CAP caps',
      });
    try {
      lossConfigOf(env);
    } catch (err) {
      if (!(err instanceof LossConfigError)) throw err;
      const name = LOSS_ENV[err.field] ?? LOSS_ENV[err.field.split('.')[0]] ?? 'TRAINER_LOSS';
      ctx.addIssue({ code: 'custom', path: [name], message: err.message.slice(err.field.length + 2) });
    }
    // Run even when other variables failed to parse: every problem is listed at once.
  },
  { when: () => true },
);
export type TrainerConfig = z.infer<typeof trainerEnv>;

type LossEnv = Pick<
  TrainerConfig,
  | 'TRAINER_LOSS'
  | 'TRAINER_EPS_LOW'
  | 'TRAINER_EPS_HIGH'
  | 'TRAINER_AGGREGATION'
  | 'TRAINER_CONSTANT_NORMALIZER'
  | 'TRAINER_TOKEN_TIS_CAP'
  | 'TRAINER_SEQ_TIS_CAP'
  | 'TRAINER_KL_COEF'
> &
  Partial<Pick<TrainerConfig, 'TRAINER_CISPO_MASK' | 'TRAINER_DUAL_CLIP'>>;

/** The loss configuration the knobs name (libs/rl lossConfig: defaults per kind; throws LossConfigError naming the field). */
export function lossConfigOf(c: LossEnv): LossConfig {
  const correction =
    c.TRAINER_TOKEN_TIS_CAP !== undefined || c.TRAINER_SEQ_TIS_CAP !== undefined
      ? {
          ...(c.TRAINER_TOKEN_TIS_CAP !== undefined ? { tokenTis: { cap: c.TRAINER_TOKEN_TIS_CAP } } : {}),
          ...(c.TRAINER_SEQ_TIS_CAP !== undefined ? { seqTis: { cap: c.TRAINER_SEQ_TIS_CAP } } : {}),
        }
      : undefined;
  return lossConfig({
    kind: c.TRAINER_LOSS,
    aggregation: c.TRAINER_AGGREGATION,
    ...(c.TRAINER_EPS_LOW !== undefined ? { epsLow: c.TRAINER_EPS_LOW } : {}),
    ...(c.TRAINER_EPS_HIGH !== undefined ? { epsHigh: c.TRAINER_EPS_HIGH } : {}),
    ...(c.TRAINER_CISPO_MASK !== undefined ? { cispoMask: c.TRAINER_CISPO_MASK } : {}),
    ...(c.TRAINER_DUAL_CLIP !== undefined ? { dualClip: c.TRAINER_DUAL_CLIP } : {}),
    ...(c.TRAINER_CONSTANT_NORMALIZER !== undefined ? { constantNormalizer: c.TRAINER_CONSTANT_NORMALIZER } : {}),
    ...(correction ? { correction } : {}),
    ...(c.TRAINER_KL_COEF ? { klCoef: c.TRAINER_KL_COEF } : {}),
  });
}

/** TrainerRuntime's options from a validated configuration. */
export function trainerOptionsOf(c: TrainerConfig): TrainerOptions {
  return {
    runId: c.TRAINER_RUN_ID,
    settings: {
      loss: lossConfigOf(c),
      lr: c.TRAINER_LR,
      warmupSteps: c.TRAINER_WARMUP_STEPS,
      decaySteps: c.TRAINER_LR_DECAY_STEPS,
      minLrFactor: c.TRAINER_LR_MIN_FACTOR,
      maxGradNorm: c.TRAINER_MAX_GRAD_NORM,
      packTokens: c.TRAINER_PACK_TOKENS,
      miniBatches: c.TRAINER_MINI_BATCHES,
    },
    publishEvery: c.TRAINER_PUBLISH_EVERY,
    checkpointEvery: c.TRAINER_CHECKPOINT_EVERY,
    maxNonFiniteSkips: c.TRAINER_MAX_NON_FINITE_SKIPS,
    initialVersion: c.INITIAL_POLICY_VERSION,
    maxBatches: c.TRAINER_MAX_BATCHES,
    group: c.TRAINER_CONSUMER_GROUP,
    publish: c.TRAINER_PUBLISH_FORMAT,
    // Absolute: the inference-proxy reads it from its own working directory.
    baseCheckpointUri: c.TRAINER_INITIAL_CHECKPOINT_DIR ? resolve(c.TRAINER_INITIAL_CHECKPOINT_DIR) : null,
  };
}

/** AdamW's settings (Model.configureOptimizer). */
export const optimizerOf = (c: TrainerConfig) => ({
  beta1: c.TRAINER_ADAM_BETA1,
  beta2: c.TRAINER_ADAM_BETA2,
  eps: c.TRAINER_ADAM_EPS,
  weightDecay: c.TRAINER_WEIGHT_DECAY,
});
