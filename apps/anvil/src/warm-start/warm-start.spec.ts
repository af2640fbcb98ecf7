import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Model } from '@anvil/engine';
import { tinyChatFormat } from '@anvil/tokenizer';
import { ChainAddEnvironment, chainAddDemonstration as demonstration } from '@anvil/rollout-manager';
import { passRate } from './sft-validation';
import { sftSamples, warmStart, warmStartKey, type WarmStartOptions } from './warm-start';

const dataDir = mkdtempSync(join(tmpdir(), 'anvil-warm-start-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

const options = (over: Partial<WarmStartOptions> = {}): WarmStartOptions => ({
  steps: 4,
  tasksPerStep: 2,
  lr: 1e-3,
  seed: 3,
  targetPassRate: 0.5,
  checkEvery: 2,
  checkFrom: 2,
  validationTasks: 6,
  task: { k: { min: 2, max: 3 }, maxOperand: 9, prompt: 'compact' },
  dataDir,
  ...over,
});

describe('warm start', () => {
  it('one SFT sample per assistant turn, ending at the end-of-turn token', () => {
    const format = tinyChatFormat();
    const env = new ChainAddEnvironment({ k: 3, maxOperand: 9, prompt: 'compact' });
    const [task] = env.generate({ seed: 1, count: 1, split: 'train' });
    const samples = sftSamples(format, task, demonstration(task));
    expect(samples).toHaveLength(3); // two tool calls and the answer
    for (const s of samples) expect(format.stopTokenIds).toContain(s.outputIds[s.outputIds.length - 1]);
    expect(format.tokenizer.decode(samples[2].outputIds, { skipSpecialTokens: true })).toBe(String((task.data as { total: number }).total));
  });

  it('trains until the step budget when the validation pass rate stays below the target, records each check, and is cached by its options', async () => {
    const logs: string[] = [];
    const built = await warmStart(options(), (l) => logs.push(l));
    expect(built.cached).toBe(false);
    expect(built.stoppedBy).toBe('steps');
    expect(built.steps).toBe(4);
    expect(built.validation.map((v) => v.step)).toEqual([2, 4]);
    // a 4-step model passes nothing
    expect(built.validation.every((v) => v.passRate === 0)).toBe(true);
    expect(logs.some((l) => /step 4: 0% of 6 validation tasks pass \(target 50%\)/.test(l))).toBe(true);
    const meta = JSON.parse(readFileSync(join(built.dir, 'warm-start.json'), 'utf8'));
    expect(meta).toMatchObject({ steps: 4, stoppedBy: 'steps', recipe: expect.stringMatching(/^sft-chain-add\//) });
    const model = await Model.load(built.dir);
    model.dispose();
    const again = await warmStart(options());
    expect(again).toMatchObject({ cached: true, dir: built.dir, steps: 4 });
    // every knob that changes the weights changes the cache key
    for (const over of [{ targetPassRate: 0.4 }, { checkEvery: 1 }, { validationTasks: 5 }, { seed: 4 }, { lr: 2e-3 }])
      expect(warmStartKey(options(over))).not.toBe(warmStartKey(options()));
  });

  it('stops at the first check that reaches the target, and trains every step with the target 0', async () => {
    const rates = [0.1, 0.6, 0.9];
    const seen: number[] = [];
    const built = await warmStart(
      options({
        steps: 10,
        seed: 5,
        measure: async (_m, tasks, step) => {
          expect(tasks).toHaveLength(6);
          seen.push(step);
          return rates[seen.length - 1];
        },
      }),
    );
    expect(seen).toEqual([2, 4]);
    expect(built).toMatchObject({
      stoppedBy: 'target',
      steps: 4,
      demonstrations: 8,
      validation: [
        { step: 2, passRate: 0.1 },
        { step: 4, passRate: 0.6 },
      ],
    });
    const noChecks = await warmStart(options({ targetPassRate: 0, seed: 6 }));
    expect(noChecks).toMatchObject({ stoppedBy: 'steps', steps: 4, validation: [] });
  });

  it('checks every fineCheckEvery steps once a check reaches fineCheckFrom (the pass rate jumps within a few dozen steps)', async () => {
    const rates = [0.1, 0.25, 0.3, 0.6];
    const seen: number[] = [];
    const built = await warmStart(
      options({
        steps: 20,
        seed: 7,
        checkEvery: 4,
        checkFrom: 4,
        fineCheckEvery: 1,
        fineCheckFrom: 0.2,
        measure: async (_m, _tasks, step) => {
          seen.push(step);
          return rates[seen.length - 1];
        },
      }),
    );
    expect(seen).toEqual([4, 8, 9, 10]);
    expect(built).toMatchObject({ stoppedBy: 'target', steps: 10 });
    expect(warmStartKey(options({ fineCheckEvery: 1 }))).not.toBe(warmStartKey(options()));
    expect(warmStartKey(options({ fineCheckFrom: 0.1 }))).not.toBe(warmStartKey(options()));
  });

  it('passRate runs whole episodes through the environment verifier: a random model passes none; no tasks is an error', async () => {
    const format = tinyChatFormat();
    const env = new ChainAddEnvironment({ k: 2, maxOperand: 9, prompt: 'compact' });
    const tasks = env.generate({ seed: 2, count: 4, split: 'train' });
    const random = Model.tiny({ seed: 1, config: { vocabSize: 272 } });
    expect(await passRate(random, format, env, tasks, { temperature: 1, maxTokensPerCall: 16, seed: 1 })).toBe(0);
    random.dispose();
    await expect(
      passRate(Model.tiny({ seed: 1, config: { vocabSize: 272 } }), format, env, [], { temperature: 1, maxTokensPerCall: 16, seed: 1 }),
    ).rejects.toThrow(/no tasks/);
  });
});
