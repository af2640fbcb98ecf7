import { describe, expect, it } from 'vitest';
import { lossConfig } from '@anvil/rl';
import { loadRunConfig, lossConfigOf, parseRunConfig, RunConfigError, trainPass } from './run-config';

describe('run config', () => {
  it('fills the demo defaults', () => {
    const c = parseRunConfig({});
    expect(c).toMatchObject({
      seed: 1,
      model: 'tiny',
      task: { set: 'chain-add', kMin: 2, kMax: 3, maxOperand: 9, prompt: 'compact', evalTasks: 100, trainTasks: 900 },
      algorithm: { loss: 'cispo', advantage: 'grpo', lr: 1e-4, lrSchedule: 'constant', minLrFactor: 0.1 },
      budget: { steps: 120 },
      eval: { everyVersions: 60, temperature: 1, samplesPerTask: 4 },
    });
  });

  it("Windowed-FIFO window: adaptive unless a number is named (DESIGN.md's round(0.3 N) is the bare Data Pool service's default)", () => {
    expect(parseRunConfig({}).scheduler.window).toBe('adaptive');
    expect(parseRunConfig({ scheduler: { groupsPerBatch: 4 } }).scheduler.window).toBe('adaptive');
    expect(parseRunConfig({ scheduler: { window: 19 } }).scheduler.window).toBe(19);
    expect(() => parseRunConfig({ scheduler: { window: 'greedy' } })).toThrow(/scheduler\.window/);
  });

  it("AdamW eps: 1e-6 for the tiny model, the design's 1e-15 for a model directory, what the user names otherwise", () => {
    expect(parseRunConfig({}).algorithm.eps).toBe(1e-6);
    expect(parseRunConfig({ model: '/models/qwen2-0.5b', warmStart: { enabled: false } }).algorithm.eps).toBe(1e-15);
    expect(parseRunConfig({ algorithm: { eps: 1e-15 } }).algorithm.eps).toBe(1e-15);
    expect(parseRunConfig({ model: '/models/qwen2-0.5b', algorithm: { eps: 1e-8 } }).algorithm.eps).toBe(1e-8);
    expect(() => parseRunConfig({ algorithm: { eps: -1 } })).toThrow(/algorithm\.eps/);
  });

  it('KL penalty to the starting weights: β 0.05 for the tiny model, none for a model directory, what the user names otherwise', () => {
    expect(parseRunConfig({}).algorithm.klCoef).toBe(0.05);
    expect(lossConfigOf(parseRunConfig({})).klCoef).toBe(0.05);
    expect(parseRunConfig({ model: '/models/qwen2-0.5b', warmStart: { enabled: false } }).algorithm.klCoef).toBe(0);
    expect(lossConfigOf(parseRunConfig({ model: '/models/qwen2-0.5b', warmStart: { enabled: false } })).klCoef).toBeUndefined();
    expect(parseRunConfig({ algorithm: { klCoef: 0 } }).algorithm.klCoef).toBe(0);
    expect(
      parseRunConfig({ model: '/models/qwen2-0.5b', warmStart: { enabled: false }, algorithm: { klCoef: 0.01 } }).algorithm.klCoef,
    ).toBe(0.01);
    expect(() => parseRunConfig({ algorithm: { klCoef: -0.1 } })).toThrow(/algorithm\.klCoef/);
  });

  it('optimizer steps per train batch: 8 for the tiny model, 1 for a model directory, what the user names otherwise', () => {
    expect(parseRunConfig({}).algorithm.miniBatches).toBe(8);
    expect(parseRunConfig({ model: '/models/qwen2-0.5b', warmStart: { enabled: false } }).algorithm.miniBatches).toBe(1);
    expect(parseRunConfig({ algorithm: { miniBatches: 1 } }).algorithm.miniBatches).toBe(1);
    expect(
      parseRunConfig({ model: '/models/qwen2-0.5b', warmStart: { enabled: false }, algorithm: { miniBatches: 2 } }).algorithm.miniBatches,
    ).toBe(2);
    expect(() => parseRunConfig({ algorithm: { miniBatches: 0 } })).toThrow(/algorithm\.miniBatches/);
    expect(() => parseRunConfig({ algorithm: { miniBatches: 65 } })).toThrow(/algorithm\.miniBatches/);
  });

  it('refuses unknown and out-of-range knobs, listing every problem at once', () => {
    let err: unknown;
    try {
      parseRunConfig({
        seeed: 1,
        rollouts: { groupSize: 1, concurrency: 4 },
        algorithm: { loss: 'dpo', lr: -1 },
        task: { kMin: 3, kMax: 2 },
      });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RunConfigError);
    const msg = (err as Error).message;
    for (const field of ['seeed', 'rollouts.groupSize', 'algorithm.loss', 'algorithm.lr']) expect(msg).toContain(field);
  });

  it('checks relations between knobs', () => {
    expect(() => parseRunConfig({ task: { kMin: 3, kMax: 2 } })).toThrow(/task\.kMax: must be >= task\.kMin/);
    expect(() => parseRunConfig({ rollouts: { concurrency: 4, groupSize: 8 } })).toThrow(/rollouts\.concurrency/);
    expect(() => parseRunConfig({ scheduler: { window: 100 } })).toThrow(/scheduler\.window/);
  });

  it("takes a rollout's call limits in task.limits; a burst without a rate is refused", () => {
    expect(parseRunConfig({ task: { limits: { maxCalls: 64, callsPerSecond: 4, burst: 8 } } }).task.limits).toMatchObject({
      maxCalls: 64,
      callsPerSecond: 4,
      burst: 8,
    });
    expect(() => parseRunConfig({ task: { limits: { burst: 8 } } })).toThrow(/task\.limits\.burst: burst needs callsPerSecond/);
    expect(() => parseRunConfig({ task: { limits: { maxCalls: 0 } } })).toThrow(/task\.limits\.maxCalls/);
    expect(() => parseRunConfig({ task: { limits: { maxCall: 5 } } })).toThrow(/maxCall/);
  });

  it('takes a config file and environment overrides', () => {
    expect(loadRunConfig({ env: { ANVIL_SEED: '3', ANVIL_MAIN_STEPS: '7' } })).toMatchObject({ seed: 3, budget: { steps: 7 } });
    expect(() => loadRunConfig({ file: '/nonexistent/run.json', env: {} })).toThrow(/--config \/nonexistent\/run.json/);
    expect(() => loadRunConfig({ env: { ANVIL_SEED: 'x' } })).toThrow(/ANVIL_SEED=x is not a number/);
  });

  it("builds the trainer loss from the algorithm knobs: the default is CISPO with the tiny model's KL penalty, corrections and a constant normaliser when asked", () => {
    expect(lossConfigOf(parseRunConfig({}))).toEqual(lossConfig({ kind: 'cispo', aggregation: 'token_mean', klCoef: 0.05, cispoMask: {} }));
    expect(lossConfigOf(parseRunConfig({ algorithm: { loss: 'ppo', epsHigh: 0.3, tokenTisCap: 2 } }))).toMatchObject({
      kind: 'ppo',
      epsLow: 0.2,
      epsHigh: 0.3,
      correction: { tokenTis: { cap: 2 } },
    });
    expect(lossConfigOf(parseRunConfig({ algorithm: { loss: 'ppo', seqTisCap: 5 } }))).toMatchObject({
      kind: 'ppo',
      correction: { seqTis: { cap: 5 } },
    });
    expect(() => parseRunConfig({ algorithm: { seqTisCap: 5 } })).toThrow(
      /algorithm\.seqTisCap: correction\.seqTis: CISPO is anchored on the behaviour logprobs/,
    );
    expect(() => parseRunConfig({ algorithm: { loss: 'ppo', tokenTisCap: 2, seqTisCap: 5 } })).toThrow(
      /algorithm\.seqTisCap: correction\.seqTis: token-level and sequence-level TIS together/,
    );
    expect(lossConfigOf(parseRunConfig({ algorithm: { aggregation: 'constant', constantNormalizer: 4096 } }))).toMatchObject({
      aggregation: 'constant',
      constantNormalizer: 4096,
    });
    expect(() => parseRunConfig({ algorithm: { aggregation: 'constant' } })).toThrow(
      /algorithm\.constantNormalizer: is required with aggregation 'constant'/,
    );
    expect(() => parseRunConfig({ algorithm: { constantNormalizer: 10 } })).toThrow(/only used with aggregation 'constant'/);
    expect(() => parseRunConfig({ algorithm: { tokenTisCap: 0, weightDecay: 2, packTokens: 0 } })).toThrow(
      /tokenTisCap[\s\S]*weightDecay[\s\S]*packTokens/,
    );
    expect(lossConfigOf(parseRunConfig({ algorithm: { cispoMask: {} } })).cispoMask).toEqual({ epsLow: 0.2, epsHigh: 0.28 });
    expect(lossConfigOf(parseRunConfig({ algorithm: { cispoMask: { epsHigh: 0.5 } } })).cispoMask).toEqual({ epsLow: 0.2, epsHigh: 0.5 });
    expect(() => parseRunConfig({ algorithm: { loss: 'ppo', cispoMask: {} } })).toThrow(
      /algorithm\.cispoMask: cispoMask: is CISPO's token mask, not used by kind 'ppo'/,
    );
    expect(() => parseRunConfig({ algorithm: { cispoMask: { low: 0.2 } } })).toThrow(/cispoMask/);
  });

  it("CISPO's token mask: on by default with several AdamW steps a batch, M1's unmasked CISPO with one or when the run says false, never for other losses", () => {
    expect(parseRunConfig({}).algorithm.cispoMask).toEqual({});
    expect(lossConfigOf(parseRunConfig({})).cispoMask).toEqual({ epsLow: 0.2, epsHigh: 0.28 });
    expect(parseRunConfig({ algorithm: { miniBatches: 1 } }).algorithm.cispoMask).toBe(false);
    expect(lossConfigOf(parseRunConfig({ algorithm: { miniBatches: 1 } })).cispoMask).toBeUndefined();
    expect(parseRunConfig({ model: '/models/qwen2-0.5b', warmStart: { enabled: false } }).algorithm.cispoMask).toBe(false);
    expect(lossConfigOf(parseRunConfig({ algorithm: { cispoMask: false } })).cispoMask).toBeUndefined();
    expect(parseRunConfig({ algorithm: { loss: 'ppo' } }).algorithm.cispoMask).toBeUndefined();
    expect(lossConfigOf(parseRunConfig({ algorithm: { loss: 'ppo' } })).cispoMask).toBeUndefined();
    expect(parseRunConfig({ algorithm: { loss: 'ppo', cispoMask: false } }).algorithm.cispoMask).toBe(false);
    // a parsed config parses again to itself (the e2e bench derives its variants this way)
    for (const c of [{}, { algorithm: { cispoMask: false } }, { algorithm: { miniBatches: 1 } }]) {
      const once = parseRunConfig(c);
      expect(parseRunConfig(JSON.parse(JSON.stringify(once)))).toEqual(once);
    }
  });

  it("PPO's dual-clip: 3 by default for the PPO kinds (verl's and SkyRL's), none for CISPO, false turns it off", () => {
    expect(parseRunConfig({ algorithm: { loss: 'ppo' } }).algorithm.dualClip).toBe(3);
    expect(lossConfigOf(parseRunConfig({ algorithm: { loss: 'ppo' } })).dualClip).toBe(3);
    expect(lossConfigOf(parseRunConfig({ algorithm: { loss: 'decoupled_ppo', dualClip: 5 } })).dualClip).toBe(5);
    expect(lossConfigOf(parseRunConfig({ algorithm: { loss: 'ppo', dualClip: false } })).dualClip).toBeUndefined();
    expect(parseRunConfig({}).algorithm.dualClip).toBeUndefined();
    expect(lossConfigOf(parseRunConfig({})).dualClip).toBeUndefined();
    expect(() => parseRunConfig({ algorithm: { dualClip: 3 } })).toThrow(
      /algorithm\.dualClip: dualClip: is PPO-clip's lower bound for negative advantages, not used by kind 'cispo'/,
    );
    expect(() => parseRunConfig({ algorithm: { loss: 'ppo', dualClip: 1 } })).toThrow(/algorithm\.dualClip/);
    const once = parseRunConfig({ algorithm: { loss: 'ppo' } });
    expect(parseRunConfig(JSON.parse(JSON.stringify(once)))).toEqual(once);
  });

  it('lists each problem on its own for callers that add more (a user run adds its files)', () => {
    try {
      parseRunConfig({ seed: -1, budget: { steps: 0 } });
      expect.unreachable();
    } catch (e) {
      expect((e as RunConfigError).issues).toEqual([expect.stringMatching(/^seed: /), expect.stringMatching(/^budget\.steps: /)]);
    }
  });
});

describe('train passes', () => {
  it('are shuffled by default, each pass and each run seed its own permutation; task.order "stored" keeps task id order', () => {
    const cfg = parseRunConfig({});
    expect(cfg.task.order).toBe('shuffled');
    const seeds = [0, 1, 2].map((p) => trainPass(cfg, 'set', p).shuffleSeed);
    expect(new Set(seeds).size).toBe(3);
    expect(seeds.every((s) => Number.isInteger(s) && (s as number) >= 0)).toBe(true);
    expect(trainPass(parseRunConfig({ seed: 2 }), 'set', 0).shuffleSeed).not.toBe(seeds[0]);
    expect(trainPass(cfg, 'set', 1)).toEqual({ taskSetId: 'set', shuffleSeed: seeds[1] });
    expect(trainPass(parseRunConfig({ task: { order: 'stored' } }), 'set', 3)).toEqual({ taskSetId: 'set' });
    expect(() => parseRunConfig({ task: { order: 'random' } })).toThrow(/task\.order/);
  });
});
