import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '@anvil/config';
import { gatewayEnv } from '@anvil/gateway';
import { inferenceProxyEnv } from '@anvil/inference-proxy';
import { middlewareEnv } from '@anvil/middleware';
import { rolloutManagerEnv } from '@anvil/rollout-manager';
import { lossConfigOf as trainerLossConfigOf, trainerEnv } from '@anvil/trainer';
import { lossConfigOf, parseRunConfig } from '../embedded/run-config';
import { APPS, serviceEnv, START_WAVES, STOP_WAVES, type RunWiring } from './service-env';

const model = mkdtempSync(join(tmpdir(), 'anvil-stack-env-'));
writeFileSync(join(model, 'config.json'), '{}');
afterAll(() => rmSync(model, { recursive: true, force: true }));

const wiring: RunWiring = {
  runId: 'stack-run-1',
  kafkaBrokers: '127.0.0.1:19092',
  databaseUrl: 'postgres://anvil@127.0.0.1:15432/anvil_stack_run_1',
  topicPrefix: 'stack-run-1.',
  adminToken: 'a'.repeat(48),
  initialCheckpointDir: model,
  checkpointDir: join(model, 'checkpoints'),
};
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
