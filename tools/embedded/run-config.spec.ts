import { describe, expect, it } from 'vitest';
import { loadRunConfig, parseRunConfig, RunConfigError } from './run-config';

describe('run config', () => {
  it('fills the demo defaults', () => {
    const c = parseRunConfig({});
    expect(c).toMatchObject({
      seed: 1,
      model: 'tiny',
      task: { set: 'chain-add', kMin: 2, kMax: 3, maxOperand: 9, prompt: 'compact' },
      algorithm: { loss: 'cispo', advantage: 'grpo' },
      budget: { steps: 90 },
    });
  });

  it('refuses unknown and out-of-range knobs, listing every problem at once', () => {
    let err: unknown;
    try {
      parseRunConfig({ seeed: 1, rollouts: { groupSize: 1, concurrency: 4 }, algorithm: { loss: 'dpo', lr: -1 }, task: { kMin: 3, kMax: 2 } });
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

  it('takes a config file and environment overrides, and refuses stray arguments', () => {
    expect(loadRunConfig([], { ANVIL_SEED: '3', ANVIL_MAIN_STEPS: '7' })).toMatchObject({ seed: 3, budget: { steps: 7 } });
    expect(() => loadRunConfig(['--steps', '5'], {})).toThrow(/unknown argument/);
    expect(() => loadRunConfig(['--config', '/nonexistent/run.json'], {})).toThrow(/--config \/nonexistent\/run.json/);
    expect(() => loadRunConfig([], { ANVIL_SEED: 'x' })).toThrow(/ANVIL_SEED=x is not a number/);
  });
});
