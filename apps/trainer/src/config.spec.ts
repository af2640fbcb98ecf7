import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '@anvil/config';
import { tinyConfig, toHfConfig } from '@anvil/engine';
import { optimizerOf, trainerEnv, trainerOptionsOf } from './config';
import { loraOptionsOf } from './lora/lora-settings';

const base = {
  KAFKA_BROKERS: '127.0.0.1:19092',
  DATABASE_URL: 'postgres://anvil@127.0.0.1:15432/anvil',
  CHECKPOINT_DIR: '/var/lib/anvil/checkpoints',
};
const load = (env: Record<string, string>) => loadConfig('trainer', trainerEnv, env);

/** The variables a rejected environment names, each once. */
function problemsOf(env: Record<string, string>): string[] {
  try {
    load(env);
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return [...new Set((e as ConfigError).problems.map((p) => p.split(':')[0]))].sort();
  }
  throw new Error('the environment was accepted');
}

describe('trainer configuration', () => {
  const model = mkdtempSync(join(tmpdir(), 'anvil-trainer-config-'));
  writeFileSync(join(model, 'config.json'), '{}');
  // a model directory of another shape than the tiny default: hidden 96, 3 query / 1 KV heads of 32 (k/v_proj: 96 -> 32)
  const tinyDir = join(model, 'tiny');
  mkdirSync(tinyDir);
  writeFileSync(
    join(tinyDir, 'config.json'),
    JSON.stringify(toHfConfig(tinyConfig({ hiddenSize: 96, numAttentionHeads: 3, numKeyValueHeads: 1 }))),
  );
  afterAll(() => rmSync(model, { recursive: true, force: true }));

  it('defaults: CISPO [0, 5], token mean, AdamW (0.9, 0.95, 1e-15), a version per batch, a resume point every 20, no budget', () => {
    const c = load(base);
    expect(c).toMatchObject({
      PORT: 8084,
      TRAINER_RUN_ID: 'default',
      TRAINER_CONSUMER_GROUP: 'anvil.trainer',
      ENGINE_THREADS: 2,
      DB_MIGRATE_ON_START: true,
      CHECKPOINT_KEEP_PUBLISHED: 4,
      CHECKPOINT_KEEP_FULL: 2,
    });
    expect(c.TRAINER_INITIAL_CHECKPOINT_DIR).toBeUndefined();
    const o = trainerOptionsOf(c);
    expect(o).toMatchObject({
      runId: 'default',
      publishEvery: 1,
      checkpointEvery: 20,
      maxNonFiniteSkips: 5,
      initialVersion: 0,
      maxBatches: 0,
      group: 'anvil.trainer',
    });
    expect(o.settings).toMatchObject({ lr: 5e-5, warmupSteps: 10, maxGradNorm: 1, packTokens: 65_536, miniBatches: 1 });
    expect(o.settings.loss).toMatchObject({ kind: 'cispo', epsLow: 1, epsHigh: 4, aggregation: 'token_mean' });
    expect(optimizerOf(c)).toEqual({ beta1: 0.9, beta2: 0.95, eps: 1e-15, weightDecay: 0 });
  });

  it('takes every knob from the environment', () => {
    const c = load({
      ...base,
      TRAINER_RUN_ID: 'run-7',
      TRAINER_INITIAL_CHECKPOINT_DIR: model,
      TRAINER_LOSS: 'decoupled_ppo',
      TRAINER_EPS_LOW: '0.2',
      TRAINER_EPS_HIGH: '0.28',
      TRAINER_AGGREGATION: 'constant',
      TRAINER_CONSTANT_NORMALIZER: '4096',
      TRAINER_TOKEN_TIS_CAP: '3',
      TRAINER_LR: '1e-4',
      TRAINER_WARMUP_STEPS: '0',
      TRAINER_MAX_GRAD_NORM: '0',
      TRAINER_MINI_BATCHES: '2',
      TRAINER_ADAM_BETA1: '0.8',
      TRAINER_ADAM_BETA2: '0.99',
      TRAINER_ADAM_EPS: '1e-8',
      TRAINER_WEIGHT_DECAY: '0.01',
      TRAINER_PACK_TOKENS: '8192',
      TRAINER_PUBLISH_EVERY: '2',
      TRAINER_CHECKPOINT_EVERY: '4',
      TRAINER_MAX_NON_FINITE_SKIPS: '0',
      INITIAL_POLICY_VERSION: '12',
      TRAINER_MAX_BATCHES: '100',
      TRAINER_CONSUMER_GROUP: 'anvil.trainer.run-7',
      ENGINE_THREADS: '8',
      DB_MIGRATE_ON_START: 'false',
      CHECKPOINT_KEEP_PUBLISHED: '10',
      CHECKPOINT_KEEP_FULL: '3',
    });
    expect(c.TRAINER_INITIAL_CHECKPOINT_DIR).toBe(model);
    expect(c).toMatchObject({ ENGINE_THREADS: 8, DB_MIGRATE_ON_START: false, CHECKPOINT_KEEP_PUBLISHED: 10, CHECKPOINT_KEEP_FULL: 3 });
    const o = trainerOptionsOf(c);
    expect(o).toMatchObject({
      runId: 'run-7',
      publishEvery: 2,
      checkpointEvery: 4,
      maxNonFiniteSkips: 0,
      initialVersion: 12,
      maxBatches: 100,
      group: 'anvil.trainer.run-7',
    });
    expect(o.settings).toMatchObject({ lr: 1e-4, warmupSteps: 0, maxGradNorm: 0, packTokens: 8192, miniBatches: 2 });
    expect(o.settings.loss).toEqual({
      kind: 'decoupled_ppo',
      epsLow: 0.2,
      epsHigh: 0.28,
      aggregation: 'constant',
      constantNormalizer: 4096,
      correction: { tokenTis: { cap: 3 } },
      prox: { mode: 'recomputed' },
      logRatioClamp: 20,
    });
    expect(optimizerOf(c)).toEqual({ beta1: 0.8, beta2: 0.99, eps: 1e-8, weightDecay: 0.01 });
    expect(trainerOptionsOf(load({ ...base, TRAINER_LOSS: 'reinforce_tis' })).settings.loss.correction).toEqual({ tokenTis: { cap: 2 } });
    expect(trainerOptionsOf(load({ ...base, TRAINER_CISPO_MASK: '0.1, 0.5' })).settings.loss.cispoMask).toEqual({
      epsLow: 0.1,
      epsHigh: 0.5,
    });
    expect(trainerOptionsOf(load({ ...base, TRAINER_LOSS: 'ppo', TRAINER_DUAL_CLIP: '3' })).settings.loss.dualClip).toBe(3);
    expect(trainerOptionsOf(load({ ...base, TRAINER_LOSS: 'ppo' })).settings.loss.dualClip).toBeUndefined();
  });

  it('LoRA: unset rank is full fine-tuning; a rank takes alpha, dropout and targets (all seven projections by default) and the publish format', () => {
    expect(loraOptionsOf(load(base))).toBeNull();
    expect(trainerOptionsOf(load(base))).toMatchObject({ publish: 'merged', baseCheckpointUri: null });
    expect(loraOptionsOf(load({ ...base, TRAINER_LORA_RANK: '8', TRAINER_LORA_ALPHA: '16' }))).toEqual({
      rank: 8,
      alpha: 16,
      dropout: 0,
      targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
      seed: 0,
    });
    const c = load({
      ...base,
      TRAINER_INITIAL_CHECKPOINT_DIR: tinyDir,
      TRAINER_LORA_RANK: '4',
      TRAINER_LORA_ALPHA: '8',
      TRAINER_LORA_DROPOUT: '0.05',
      TRAINER_LORA_TARGETS: 'q_proj, down_proj',
      TRAINER_PUBLISH_FORMAT: 'adapter',
    });
    expect(loraOptionsOf(c)).toMatchObject({ rank: 4, alpha: 8, dropout: 0.05, targets: ['q_proj', 'down_proj'] });
    expect(trainerOptionsOf(c)).toMatchObject({ publish: 'adapter', baseCheckpointUri: tinyDir });
  });

  it('refuses LoRA knobs the starting model cannot take or that contradict each other, naming the variable, at start', () => {
    // the tiny model's narrowest projections (k_proj, v_proj: 128 -> 64) bound the rank
    expect(() => load({ ...base, TRAINER_LORA_RANK: '65', TRAINER_LORA_ALPHA: '8' })).toThrow(
      /TRAINER_LORA_RANK: rank 65 is out of range for k_proj \(128 -> 64 features\): it must be in \[1, 64\]/,
    );
    expect(() => load({ ...base, TRAINER_LORA_RANK: '64', TRAINER_LORA_ALPHA: '8', TRAINER_LORA_TARGETS: 'q_proj,up_proj' })).not.toThrow();
    // a model directory's own shape
    expect(
      problemsOf({
        ...base,
        TRAINER_INITIAL_CHECKPOINT_DIR: tinyDir,
        TRAINER_LORA_RANK: '100',
        TRAINER_LORA_ALPHA: '8',
        TRAINER_LORA_TARGETS: 'v_proj',
      }),
    ).toEqual(['TRAINER_LORA_RANK']);
    expect(() => load({ ...base, TRAINER_LORA_RANK: '4', TRAINER_LORA_ALPHA: '8', TRAINER_LORA_TARGETS: 'q_proj,lm_head' })).toThrow(
      /TRAINER_LORA_TARGETS: .*"lm_head" is not a projection \(q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj\)/,
    );
    expect(problemsOf({ ...base, TRAINER_LORA_RANK: '0', TRAINER_LORA_ALPHA: '0', TRAINER_LORA_DROPOUT: '1' })).toEqual([
      'TRAINER_LORA_ALPHA',
      'TRAINER_LORA_DROPOUT',
      'TRAINER_LORA_RANK',
    ]);
    expect(() => load({ ...base, TRAINER_LORA_RANK: '4' })).toThrow(/TRAINER_LORA_ALPHA: is required with TRAINER_LORA_RANK/);
    expect(problemsOf({ ...base, TRAINER_LORA_ALPHA: '8', TRAINER_LORA_TARGETS: 'q_proj', TRAINER_LORA_DROPOUT: '0.1' })).toEqual([
      'TRAINER_LORA_ALPHA',
      'TRAINER_LORA_DROPOUT',
      'TRAINER_LORA_TARGETS',
    ]);
    expect(() => load({ ...base, TRAINER_PUBLISH_FORMAT: 'adapter' })).toThrow(/TRAINER_PUBLISH_FORMAT: adapter needs LoRA/);
    expect(() => load({ ...base, TRAINER_LORA_RANK: '4', TRAINER_LORA_ALPHA: '8', TRAINER_PUBLISH_FORMAT: 'adapter' })).toThrow(
      /TRAINER_PUBLISH_FORMAT: adapter needs TRAINER_INITIAL_CHECKPOINT_DIR/,
    );
    expect(problemsOf({ ...base, TRAINER_PUBLISH_FORMAT: 'delta' })).toEqual(['TRAINER_PUBLISH_FORMAT']);
  });

  it('refuses a dual-clip outside the PPO kinds or at c <= 1, naming TRAINER_DUAL_CLIP', () => {
    expect(problemsOf({ ...base, TRAINER_DUAL_CLIP: '3' })).toEqual(['TRAINER_DUAL_CLIP']);
    expect(() => load({ ...base, TRAINER_DUAL_CLIP: '3' })).toThrow(/TRAINER_DUAL_CLIP: .*not used by kind 'cispo'/);
    expect(problemsOf({ ...base, TRAINER_LOSS: 'ppo', TRAINER_DUAL_CLIP: '1' })).toEqual(['TRAINER_DUAL_CLIP']);
  });

  it('lists every out-of-range or unknown value at once, by variable', () => {
    expect(
      problemsOf({
        KAFKA_BROKERS: '127.0.0.1:19092',
        DATABASE_URL: 'postgres://anvil@127.0.0.1:15432/anvil',
        PORT: '70000',
        TRAINER_RUN_ID: '',
        TRAINER_INITIAL_CHECKPOINT_DIR: join(model, 'missing'),
        TRAINER_LOSS: 'sgd',
        TRAINER_EPS_LOW: '1.5',
        TRAINER_EPS_HIGH: '-1',
        TRAINER_AGGREGATION: 'sum',
        TRAINER_LR: '0',
        TRAINER_WARMUP_STEPS: '-3',
        TRAINER_MAX_GRAD_NORM: '-1',
        TRAINER_MINI_BATCHES: '0',
        TRAINER_ADAM_BETA1: '1',
        TRAINER_ADAM_BETA2: 'high',
        TRAINER_ADAM_EPS: '0',
        TRAINER_PACK_TOKENS: '0',
        TRAINER_PUBLISH_EVERY: '0',
        TRAINER_CHECKPOINT_EVERY: '1.5',
        TRAINER_MAX_NON_FINITE_SKIPS: '-1',
        INITIAL_POLICY_VERSION: 'v1',
        TRAINER_MAX_BATCHES: '-1',
        ENGINE_THREADS: '0',
        DB_MIGRATE_ON_START: 'yes',
        CHECKPOINT_KEEP_FULL: '0',
      }),
    ).toEqual(
      [
        'CHECKPOINT_DIR',
        'CHECKPOINT_KEEP_FULL',
        'DB_MIGRATE_ON_START',
        'ENGINE_THREADS',
        'INITIAL_POLICY_VERSION',
        'PORT',
        'TRAINER_ADAM_BETA1',
        'TRAINER_ADAM_BETA2',
        'TRAINER_ADAM_EPS',
        'TRAINER_AGGREGATION',
        'TRAINER_CHECKPOINT_EVERY',
        'TRAINER_EPS_HIGH',
        'TRAINER_EPS_LOW',
        'TRAINER_INITIAL_CHECKPOINT_DIR',
        'TRAINER_LOSS',
        'TRAINER_LR',
        'TRAINER_MAX_BATCHES',
        'TRAINER_MAX_GRAD_NORM',
        'TRAINER_MAX_NON_FINITE_SKIPS',
        'TRAINER_MINI_BATCHES',
        'TRAINER_PACK_TOKENS',
        'TRAINER_PUBLISH_EVERY',
        'TRAINER_RUN_ID',
        'TRAINER_WARMUP_STEPS',
      ].sort(),
    );
  });

  it('refuses loss knobs that contradict each other, naming the variable, together with any other problem', () => {
    expect(problemsOf({ ...base, TRAINER_TOKEN_TIS_CAP: '2', PORT: 'eighty' })).toEqual(['PORT', 'TRAINER_TOKEN_TIS_CAP']); // CISPO's clip already is the truncated ratio
    expect(problemsOf({ ...base, TRAINER_AGGREGATION: 'constant' })).toEqual(['TRAINER_CONSTANT_NORMALIZER']);
    expect(problemsOf({ ...base, TRAINER_CONSTANT_NORMALIZER: '100' })).toEqual(['TRAINER_CONSTANT_NORMALIZER']);
    expect(problemsOf({ ...base, TRAINER_LOSS: 'ppo', TRAINER_TOKEN_TIS_CAP: '2' })).toEqual(['TRAINER_TOKEN_TIS_CAP']);
    expect(problemsOf({ ...base, TRAINER_LOSS: 'reinforce_tis', TRAINER_TOKEN_TIS_CAP: '2', TRAINER_SEQ_TIS_CAP: '5' })).toEqual([
      'TRAINER_SEQ_TIS_CAP',
    ]);
    expect(problemsOf({ ...base, TRAINER_LOSS: 'ppo', TRAINER_CISPO_MASK: '0.2,0.28' })).toEqual(['TRAINER_CISPO_MASK']); // PPO masks through its own clip
    expect(problemsOf({ ...base, TRAINER_CISPO_MASK: '1.5,0.28' })).toEqual(['TRAINER_CISPO_MASK']);
    expect(problemsOf({ ...base, TRAINER_CISPO_MASK: '0.2' })).toEqual(['TRAINER_CISPO_MASK']);
    expect(problemsOf({ ...base, TRAINER_LOSS: 'decoupled_ppo', TRAINER_SEQ_TIS_CAP: '5' })).toEqual(['TRAINER_SEQ_TIS_CAP']);
    expect(problemsOf({ ...base, TRAINER_KL_COEF: '-0.1' })).toEqual(['TRAINER_KL_COEF']);
    // a knob that fails on its own is reported once, not again by the relation check
    expect(problemsOf({ ...base, TRAINER_LOSS: 'sgd', TRAINER_TOKEN_TIS_CAP: '2' })).toEqual(['TRAINER_LOSS']);
  });
});
