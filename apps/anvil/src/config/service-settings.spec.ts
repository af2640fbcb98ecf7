import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '@anvil/config';
import { gatewayEnv } from '@anvil/gateway';
import { inferenceProxyEnv } from '@anvil/inference-proxy';
import { middlewareEnv } from '@anvil/middleware';
import { rolloutManagerEnv } from '@anvil/rollout-manager';
import { loraOptionsOf, lossConfigOf as trainerLossConfigOf, trainerEnv } from '@anvil/trainer';
import type { z } from 'zod';
import { taskSetOf } from '../run/task-set';
import { lossConfigOf, parseRunConfig, runConfigSchema, trainPass, type RunConfig } from './run-config';
import {
  APPS,
  serviceEnv as envOf,
  serviceSettings,
  START_WAVES,
  STOP_WAVES,
  type App,
  type RunInfrastructure,
  type RunWiring,
} from './service-settings';

const model = mkdtempSync(join(tmpdir(), 'anvil-stack-env-'));
writeFileSync(join(model, 'config.json'), '{}');
afterAll(() => rmSync(model, { recursive: true, force: true }));

const wiring: RunWiring = {
  runId: 'stack-run-1',
  model: { checkpointDir: model, chatFormatDir: null, servedName: 'anvil-tiny' },
  adminToken: 'a'.repeat(48),
  checkpointDir: join(model, 'checkpoints'),
};
const infra: RunInfrastructure = {
  kafkaBrokers: '127.0.0.1:19092',
  databaseUrl: 'postgres://anvil@127.0.0.1:15432/anvil_stack_run_1',
  topicPrefix: 'stack-run-1.',
};
const serviceEnv = (app: App, cfg: ReturnType<typeof parseRunConfig>, w: RunWiring, urls: Partial<Record<App, string>>) =>
  envOf(app, cfg, w, infra, urls);
const urls = { 'inference-proxy': 'http://127.0.0.1:1', gateway: 'http://127.0.0.1:2' };
const schemas = {
  gateway: gatewayEnv,
  'inference-proxy': inferenceProxyEnv,
  'rollout-manager': rolloutManagerEnv,
  middleware: middlewareEnv,
  trainer: trainerEnv,
};

describe('the services environments of a stack run', () => {
  it("pass each service's own validation, for the defaults and for a configuration far from them", () => {
    const configs = [
      parseRunConfig({}),
      parseRunConfig({
        rollouts: { groupSize: 4, concurrency: 16, eta: 0 },
        scheduler: { groupsPerBatch: 2, window: 'adaptive', dropZeroVariance: false },
        algorithm: { loss: 'ppo', epsLow: 0.2, epsHigh: 0.28, advantage: 'rloo', processRewardWeight: 0, lr: 3e-4, miniBatches: 2 },
        engineThreads: 2,
      }),
    ];
    for (const cfg of configs)
      for (const app of APPS) expect(() => loadConfig(app, schemas[app], serviceEnv(app, cfg, wiring, urls)), app).not.toThrow();
  });

  it('carries the knobs to the service that owns them and shares what must agree', () => {
    const cfg = parseRunConfig({
      rollouts: { groupSize: 4, concurrency: 16, eta: 3 },
      scheduler: { groupsPerBatch: 2, window: 5 },
      budget: { steps: 12 },
    });
    const env = Object.fromEntries(APPS.map((a) => [a, serviceEnv(a, cfg, wiring, urls)]));
    expect([env.gateway.MAX_STALENESS, env['rollout-manager'].MAX_STALENESS]).toEqual(['3', '3']);
    expect([env.middleware.DATA_POOL_RUN_ID, env.trainer.TRAINER_RUN_ID]).toEqual(['stack-run-1', 'stack-run-1']);
    expect([env.gateway.GATEWAY_ADMIN_TOKEN, env['rollout-manager'].GATEWAY_ADMIN_TOKEN]).toEqual([wiring.adminToken, wiring.adminToken]);
    expect(APPS.filter((a) => 'GATEWAY_ADMIN_TOKEN' in env[a])).toEqual(['gateway', 'rollout-manager']);
    expect([env['inference-proxy'].EMBEDDED_CHECKPOINT_DIR, env.trainer.TRAINER_INITIAL_CHECKPOINT_DIR]).toEqual([model, model]);
    expect(env.middleware).toMatchObject({ DATA_POOL_IN_FLIGHT: '16', DATA_POOL_BATCH_TRAJECTORIES: '8', DATA_POOL_WINDOW: '5' });
    // the run configuration's default window reaches the service, whose own default differs
    expect(serviceEnv('middleware', parseRunConfig({}), wiring, urls).DATA_POOL_WINDOW).toBe('adaptive');
    // and so does its CISPO mask (on with several AdamW steps a batch; the bare trainer's default is none)
    expect(serviceEnv('trainer', parseRunConfig({}), wiring, urls).TRAINER_CISPO_MASK).toBe('0.2,0.28');
    expect(serviceEnv('trainer', parseRunConfig({ algorithm: { cispoMask: false } }), wiring, urls)).not.toHaveProperty(
      'TRAINER_CISPO_MASK',
    );
    // PPO's dual-clip: the run configuration's 3 for the PPO kinds, none for CISPO or when the run says false
    expect(serviceEnv('trainer', parseRunConfig({ algorithm: { loss: 'ppo' } }), wiring, urls).TRAINER_DUAL_CLIP).toBe('3');
    expect(serviceEnv('trainer', parseRunConfig({ algorithm: { loss: 'ppo', dualClip: false } }), wiring, urls)).not.toHaveProperty(
      'TRAINER_DUAL_CLIP',
    );
    expect(serviceEnv('trainer', parseRunConfig({}), wiring, urls)).not.toHaveProperty('TRAINER_DUAL_CLIP');
    expect(env.trainer).toMatchObject({ TRAINER_MAX_BATCHES: '12', CHECKPOINT_DIR: wiring.checkpointDir, TRAINER_LR_DECAY_STEPS: '0' }); // the default lr is constant
    const cosine = parseRunConfig({ algorithm: { lrSchedule: 'cosine', minLrFactor: 0.2, miniBatches: 2 }, budget: { steps: 12 } });
    expect(serviceEnv('trainer', cosine, wiring, urls)).toMatchObject({ TRAINER_LR_DECAY_STEPS: '24', TRAINER_LR_MIN_FACTOR: '0.2' });
    expect(env['inference-proxy']).toMatchObject({ EMBEDDED_MAX_BATCH: '16', MAX_IN_FLIGHT_PER_REPLICA: '32' });
    // every trainer knob of the run config, the loss's corrections and normaliser included
    const knobs = parseRunConfig({
      algorithm: {
        loss: 'reinforce_tis',
        aggregation: 'constant',
        constantNormalizer: 4096,
        tokenTisCap: 3,
        weightDecay: 0.01,
        packTokens: 8192,
        klCoef: 0.05,
      },
    });
    const trainer = loadConfig('trainer', trainerEnv, serviceEnv('trainer', knobs, wiring, urls));
    expect(trainer).toMatchObject({
      TRAINER_CONSTANT_NORMALIZER: 4096,
      TRAINER_TOKEN_TIS_CAP: 3,
      TRAINER_WEIGHT_DECAY: 0.01,
      TRAINER_PACK_TOKENS: 8192,
      TRAINER_KL_COEF: 0.05,
    });
    expect(trainerLossConfigOf(trainer)).toEqual(lossConfigOf(knobs));
    const seqTis = parseRunConfig({ algorithm: { loss: 'reinforce_tis', seqTisCap: 8 } });
    const seqTrainer = loadConfig('trainer', trainerEnv, serviceEnv('trainer', seqTis, wiring, urls));
    expect(seqTrainer.TRAINER_SEQ_TIS_CAP).toBe(8);
    expect(trainerLossConfigOf(seqTrainer)).toEqual(lossConfigOf(seqTis));
    // LoRA: the adapters and the publish format reach the trainer; absent, it fine-tunes every weight
    const lora = parseRunConfig({
      algorithm: { lora: { rank: 8, alpha: 16, dropout: 0.05, targets: ['q_proj', 'v_proj'] }, publish: 'adapter' },
    });
    const loraTrainer = loadConfig('trainer', trainerEnv, serviceEnv('trainer', lora, wiring, urls));
    expect(loraOptionsOf(loraTrainer)).toEqual({ rank: 8, alpha: 16, dropout: 0.05, targets: ['q_proj', 'v_proj'], seed: 0 });
    expect(loraTrainer.TRAINER_PUBLISH_FORMAT).toBe('adapter');
    expect(loraOptionsOf(trainer)).toBeNull();
    for (const app of APPS) expect(env[app]).toMatchObject({ KAFKA_TOPIC_PREFIX: 'stack-run-1.', PORT: '0', HOST: '127.0.0.1' });
  });

  it('starts each service after those whose address it needs, and stops every service once', () => {
    expect(() => serviceEnv('gateway', parseRunConfig({}), wiring, {})).toThrow(/inference-proxy/);
    const startedBefore = (app: string) =>
      START_WAVES.slice(
        0,
        START_WAVES.findIndex((w) => w.includes(app as never)),
      ).flat();
    expect(startedBefore('gateway')).toContain('inference-proxy');
    expect(startedBefore('rollout-manager')).toContain('gateway');
    expect(START_WAVES.flat().sort()).toEqual([...APPS].sort());
    expect(STOP_WAVES.flat().sort()).toEqual([...APPS].sort());
  });
});

describe('every knob of the run configuration reaches the services of both ways to run', () => {
  type Partial = Record<string, unknown>;
  type Reach =
    | { reaches: 'service' }
    | { reaches: 'task-set' }
    | { reaches: 'driver'; why: string; check?: (base: RunConfig, variant: RunConfig) => boolean };
  const jsonl = { task: { set: '/data/tasks.jsonl' } };
  const blackBox = { kind: 'black-box', name: 'a', command: ['python3', 'agent.py'] };
  // One non-default value per knob (and what it needs beside it), and where it must show up.
  const KNOBS: Record<string, { set: Partial; base?: Partial } & Reach> = {
    seed: { set: { seed: 7 }, reaches: 'task-set' },
    dataDir: { set: { dataDir: '/tmp/elsewhere' }, reaches: 'driver', why: 'the run directory: database, checkpoints, logs and reports' },
    model: {
      set: { model: '/models/m' },
      reaches: 'driver',
      why: 'the starting weights (run/starting-model.ts), handed to the services as RunWiring.model',
    },
    servedModelName: { set: { servedModelName: 'policy' }, reaches: 'driver', why: 'RunWiring.model.servedName (run/starting-model.ts)' },
    engineThreads: { set: { engineThreads: 2 }, reaches: 'service' },
    'task.set': { set: jsonl, reaches: 'task-set' },
    'task.kMin': { set: { task: { kMin: 3, kMax: 3 } }, base: { task: { kMax: 3 } }, reaches: 'task-set' },
    'task.kMax': { set: { task: { kMax: 4 } }, reaches: 'task-set' },
    'task.maxOperand': { set: { task: { maxOperand: 50 } }, reaches: 'task-set' },
    'task.prompt': { set: { task: { prompt: 'full' } }, reaches: 'task-set' },
    'task.evalTasks': { set: { task: { evalTasks: 10 } }, reaches: 'task-set' },
    'task.trainTasks': { set: { task: { trainTasks: 100 } }, reaches: 'task-set' },
    'task.order': {
      set: { task: { order: 'stored' } },
      reaches: 'driver',
      why: 'the order train passes are submitted in (trainPass)',
      check: (b, v) => JSON.stringify(trainPass(b, 's', 0)) !== JSON.stringify(trainPass(v, 's', 0)),
    },
    'task.toolDelay': { set: { task: { toolDelay: { kind: 'fixed', ms: 5 } } }, reaches: 'task-set' },
    'task.agent': { set: { task: { agent: blackBox } }, reaches: 'task-set' },
    'task.verifier': { set: { task: { verifier: { kind: 'function', name: 'final-answer' } } }, reaches: 'task-set' },
    'task.context': { set: { task: { context: { kind: 'sliding_window', lastTurns: 2 } } }, reaches: 'task-set' },
    'task.limits': { set: { task: { limits: { maxSteps: 3 } } }, reaches: 'task-set' },
    'task.env': { set: { task: { set: '/data/tasks.jsonl', env: 'long-horizon' } }, base: jsonl, reaches: 'task-set' },
    'task.envConfig': {
      set: { task: { set: '/data/tasks.jsonl', env: 'long-horizon', envConfig: { x: 1 } } },
      base: { task: { set: '/data/tasks.jsonl', env: 'long-horizon' } },
      reaches: 'task-set',
    },
    'task.builtinTools': { set: { task: { builtinTools: ['memory'] } }, reaches: 'task-set' },
    'task.weightSwap': { set: { task: { weightSwap: 'abort-and-resume' } }, reaches: 'task-set' },
    'rollouts.groupSize': { set: { rollouts: { groupSize: 4 } }, reaches: 'service' },
    'rollouts.concurrency': { set: { rollouts: { concurrency: 32 } }, reaches: 'service' },
    'rollouts.eta': { set: { rollouts: { eta: 1 } }, reaches: 'service' },
    'rollouts.temperature': { set: { rollouts: { temperature: 0.7 } }, reaches: 'task-set' },
    'rollouts.maxTokensPerCall': { set: { rollouts: { maxTokensPerCall: 128 } }, reaches: 'task-set' },
    'scheduler.groupsPerBatch': { set: { scheduler: { groupsPerBatch: 4 } }, reaches: 'service' },
    'scheduler.window': { set: { scheduler: { window: 16 } }, reaches: 'service' },
    'scheduler.dropZeroVariance': { set: { scheduler: { dropZeroVariance: false } }, reaches: 'service' },
    'algorithm.loss': { set: { algorithm: { loss: 'ppo' } }, reaches: 'service' },
    'algorithm.epsLow': { set: { algorithm: { epsLow: 0.5 } }, reaches: 'service' },
    'algorithm.epsHigh': { set: { algorithm: { epsHigh: 2 } }, reaches: 'service' },
    'algorithm.cispoMask': { set: { algorithm: { cispoMask: { epsHigh: 0.5 } } }, reaches: 'service' },
    'algorithm.dualClip': { set: { algorithm: { loss: 'ppo', dualClip: 5 } }, base: { algorithm: { loss: 'ppo' } }, reaches: 'service' },
    'algorithm.aggregation': { set: { algorithm: { aggregation: 'trajectory' } }, reaches: 'service' },
    'algorithm.constantNormalizer': {
      set: { algorithm: { aggregation: 'constant', constantNormalizer: 100 } },
      base: { algorithm: { aggregation: 'constant', constantNormalizer: 50 } },
      reaches: 'service',
    },
    'algorithm.tokenTisCap': {
      set: { algorithm: { loss: 'ppo', tokenTisCap: 2 } },
      base: { algorithm: { loss: 'ppo' } },
      reaches: 'service',
    },
    'algorithm.seqTisCap': { set: { algorithm: { loss: 'ppo', seqTisCap: 2 } }, base: { algorithm: { loss: 'ppo' } }, reaches: 'service' },
    'algorithm.advantage': { set: { algorithm: { advantage: 'rloo' } }, reaches: 'service' },
    'algorithm.processRewardWeight': { set: { algorithm: { processRewardWeight: 0 } }, reaches: 'service' },
    'algorithm.lr': { set: { algorithm: { lr: 3e-4 } }, reaches: 'service' },
    'algorithm.warmupSteps': { set: { algorithm: { warmupSteps: 5 } }, reaches: 'service' },
    'algorithm.lrSchedule': { set: { algorithm: { lrSchedule: 'cosine' } }, reaches: 'service' },
    'algorithm.minLrFactor': { set: { algorithm: { minLrFactor: 0.5 } }, reaches: 'service' },
    'algorithm.maxGradNorm': { set: { algorithm: { maxGradNorm: 0.5 } }, reaches: 'service' },
    'algorithm.miniBatches': { set: { algorithm: { miniBatches: 2 } }, reaches: 'service' },
    'algorithm.beta1': { set: { algorithm: { beta1: 0.8 } }, reaches: 'service' },
    'algorithm.beta2': { set: { algorithm: { beta2: 0.99 } }, reaches: 'service' },
    'algorithm.eps': { set: { algorithm: { eps: 1e-8 } }, reaches: 'service' },
    'algorithm.weightDecay': { set: { algorithm: { weightDecay: 0.1 } }, reaches: 'service' },
    'algorithm.packTokens': { set: { algorithm: { packTokens: 4096 } }, reaches: 'service' },
    'algorithm.klCoef': { set: { algorithm: { klCoef: 0.1 } }, reaches: 'service' },
    'algorithm.lora': { set: { algorithm: { lora: { rank: 8, alpha: 16 } } }, reaches: 'service' },
    'algorithm.publish': {
      set: { algorithm: { lora: { rank: 8, alpha: 16 }, publish: 'adapter' } },
      base: { algorithm: { lora: { rank: 8, alpha: 16 } } },
      reaches: 'service',
    },
    'budget.steps': { set: { budget: { steps: 10 } }, reaches: 'service' },
    'budget.seconds': { set: { budget: { seconds: 60 } }, reaches: 'driver', why: 'the wall-clock cap the driver keeps' },
    'budget.stallSeconds': { set: { budget: { stallSeconds: 30 } }, reaches: 'driver', why: 'the driver ends a stalled run' },
    'eval.everyVersions': {
      set: { eval: { everyVersions: 5 } },
      reaches: 'driver',
      why: 'the driver holds the trainer at each K-th version',
    },
    'eval.temperature': { set: { eval: { temperature: 0.5 } }, reaches: 'driver', why: "the driver's evaluation requests" },
    'eval.samplesPerTask': { set: { eval: { samplesPerTask: 2 } }, reaches: 'driver', why: "the driver's evaluation requests" },
    checkpointEvery: { set: { checkpointEvery: 5 }, reaches: 'service' },
  };
  // warmStart.* build the starting weights before any service starts (run/starting-model.ts).
  for (const k of Object.keys(runConfigSchema.shape.warmStart.unwrap().shape))
    KNOBS[`warmStart.${k}`] = {
      set: {
        warmStart: {
          fineCheckFrom: 0.1,
          enabled: false,
          seed: 9,
          steps: 10,
          tasksPerStep: 4,
          lr: 0.01,
          targetPassRate: 0.5,
          checkEvery: 5,
          checkFrom: 5,
          fineCheckEvery: 2,
          validationTasks: 10,
        },
      },
      reaches: 'driver',
      why: 'the warm start (the starting weights) is built before the services start',
    };

  const knobPaths = (shape: Record<string, z.ZodType>, prefix = ''): string[] =>
    Object.entries(shape).flatMap(([k, v]) => {
      const path = prefix ? `${prefix}.${k}` : k;
      const def = (v as unknown as { _zod: { def: { type: string; innerType: z.ZodType } } })._zod.def;
      const inner = def.innerType as unknown as { _zod: { def: { type: string; shape: Record<string, z.ZodType> } } } | undefined;
      return def.type === 'prefault' && inner?._zod.def.type === 'object' ? knobPaths(inner._zod.def.shape, path) : [path];
    });

  const settingsOf = (cfg: RunConfig) => Object.fromEntries(APPS.map((a) => [a, serviceSettings(a, cfg, wiring, urls)]));
  const taskSetOfCfg = async (cfg: RunConfig) => {
    const ts = taskSetOf(cfg);
    const loads: unknown[] = [];
    if (cfg.task.set === 'chain-add')
      await ts.load({ loadBuiltin: async (s) => void loads.push(s), loadJsonl: async (s, j) => void loads.push([s, j]) });
    return JSON.stringify({ spec: ts.spec, evalTaskSetId: ts.evalTaskSetId, loads });
  };

  it('names every knob of the schema (a new knob must say where it goes)', () => {
    expect(knobPaths(runConfigSchema.shape as unknown as Record<string, z.ZodType>).sort()).toEqual(Object.keys(KNOBS).sort());
  });

  it.each(Object.entries(KNOBS))('%s', async (knob, k) => {
    const base = parseRunConfig(k.base ?? {});
    const variant = parseRunConfig(k.set);
    if (k.reaches === 'service') expect(settingsOf(variant), knob).not.toEqual(settingsOf(base));
    else if (k.reaches === 'task-set') expect(await taskSetOfCfg(variant), knob).not.toEqual(await taskSetOfCfg(base));
    else {
      expect(k.why.length).toBeGreaterThan(10);
      if (k.check) expect(k.check(base, variant), knob).toBe(true);
    }
  });

  it('hands each service only variables its own schema knows (none silently dropped), in both ways to run', () => {
    const far = parseRunConfig({
      engineThreads: 2,
      algorithm: {
        ...{ loss: 'ppo', tokenTisCap: 2, weightDecay: 0.1, packTokens: 4096, klCoef: 0.1, epsLow: 0.1, epsHigh: 0.3 },
        ...{ lora: { rank: 8, alpha: 16, dropout: 0.05, targets: ['q_proj', 'v_proj'] }, publish: 'adapter' },
      },
      scheduler: { window: 16 },
    });
    const userModel = { ...wiring, model: { checkpointDir: model, chatFormatDir: model, servedName: 'policy' } };
    for (const w of [wiring, userModel])
      for (const app of APPS) {
        const settings = serviceSettings(app, far, w, urls);
        const known = new Set(Object.keys(schemas[app].shape));
        expect(
          Object.keys(settings).filter((key) => !known.has(key)),
          app,
        ).toEqual([]);
        // the distributed process gets every setting the in-process host parses
        expect(envOf(app, far, w, infra, urls)).toMatchObject(settings);
      }
  });

  it('hands the starting weights, the served name and a chat format to every service that needs them', () => {
    const w = { ...wiring, model: { checkpointDir: '/m/ckpt', chatFormatDir: '/m/tok', servedName: 'policy' } };
    const cfg = parseRunConfig({});
    expect(serviceSettings('inference-proxy', cfg, w, urls).EMBEDDED_CHECKPOINT_DIR).toBe('/m/ckpt');
    expect(serviceSettings('trainer', cfg, w, urls)).toMatchObject({
      TRAINER_INITIAL_CHECKPOINT_DIR: '/m/ckpt',
      TRAINER_TOKENIZER_DIR: '/m/tok',
    });
    expect(serviceSettings('gateway', cfg, w, urls)).toMatchObject({
      GATEWAY_MODEL_NAME: 'policy',
      GATEWAY_CHAT_FORMAT: 'hf',
      GATEWAY_TOKENIZER_DIR: '/m/tok',
    });
    expect(serviceSettings('rollout-manager', cfg, w, urls).GATEWAY_MODEL_NAME).toBe('policy');
  });
});
