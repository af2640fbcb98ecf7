import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Model } from '@anvil/engine';
import { waitFor } from '@anvil/testing';
import { batchEvent } from '../testing/batch-log';
import { loraTestEnv, saveTinyModel, trainerHarness } from '../testing/trainer-harness';

const root = mkdtempSync(join(tmpdir(), 'anvil-trainer-lora-resume-'));
const baseDir = join(root, 'base');
const otherBaseDir = join(root, 'other-base');
afterAll(() => rmSync(root, { recursive: true, force: true }));
beforeAll(async () => {
  await saveTinyModel(baseDir, 1);
  await saveTinyModel(otherBaseDir, 2);
});

// dropout on: a resume must draw the masks the uninterrupted run drew
const loraEnv = (checkpoints: string, extra: Record<string, string> = {}) =>
  loraTestEnv(join(root, checkpoints), baseDir, { TRAINER_LORA_DROPOUT: '0.2', ...extra });
const log = [0, 1, 2].map((s) => batchEvent(s, 30 + s));
const adaptersOf = (m: Model) => m.loraTensors.map((t) => Array.from(t.data));

/** Files under a checkpoint root, for "nothing was written". */
const listing = (dir: string) => readdirSync(dir, { recursive: true }).map(String).sort();

describe('LoRA resume', () => {
  it.each(['merged', 'adapter'])(
    'publish %s: a restart restores the adapters and their AdamW state from the last resume point; the batch after it is trained again to the same adapters, dropout masks included',
    async (format) => {
      const env = loraEnv(`resume-${format}`, { TRAINER_PUBLISH_FORMAT: format });
      const first = await trainerHarness(env, log);
      await first.trainAll(log); // "crash" after batch 2: the resume point is after batch 1 (version 2)
      expect(first.steps.map((s) => s.checkpointed)).toEqual([false, true, false]);
      const uninterrupted = adaptersOf(first.model);
      await first.close();

      const second = await trainerHarness(env, log);
      await second.trainer.start();
      await waitFor('the retrained batch', async () => (second.steps.length >= 1 ? true : undefined), 60_000, 20);
      await second.trainer.stop();
      expect(second.steps.map((s) => [s.batchStep, s.fromVersion, s.version])).toEqual([[2, 4, 5]]);
      expect(second.published().map((p) => p.version)).toEqual([4, 5]);
      expect(adaptersOf(second.model)).toEqual(uninterrupted);
      expect(second.model.stepCount).toBe(6);
      await second.close();
    },
  );

  it('dropout masks come from the optimizer step, not from the process: training forwards drawn before the resume change nothing', async () => {
    const env = loraEnv('resume-warm');
    const first = await trainerHarness(env, log);
    await first.trainAll(log);
    const uninterrupted = adaptersOf(first.model);
    await first.close();
    const second = await trainerHarness(env, log);
    for (let i = 0; i < 3; i++) {
      const r = await second.model.forward({ tokens: Int32Array.from([1, 2, 3]), parents: Int32Array.from([-1, 0, 1]) }, { train: true });
      r.handle.dispose();
    }
    await second.trainer.start();
    await waitFor('the retrained batch', async () => (second.steps.length >= 1 ? true : undefined), 60_000, 20);
    await second.trainer.stop();
    expect(adaptersOf(second.model)).toEqual(uninterrupted);
    await second.close();
  });

  it('refuses, before training or writing anything: adapters of another base, another LoRA configuration, and a checkpoint of the other kind', async () => {
    const dir = 'refusals';
    const first = await trainerHarness(loraEnv(dir), log);
    await first.trainAll(log.slice(0, 2));
    await first.close();
    const before = listing(join(root, dir));

    const cases: [Record<string, string>, RegExp][] = [
      [
        { TRAINER_INITIAL_CHECKPOINT_DIR: otherBaseDir },
        /cannot resume: .*trained on another base model.*TRAINER_INITIAL_CHECKPOINT_DIR must hold the base/,
      ],
      [{ TRAINER_LORA_RANK: '8' }, /the checkpoint's adapters \(rank 4, .*\) are not the configured ones \(rank 8, /],
      [{ TRAINER_LORA_TARGETS: 'q_proj' }, /are not the configured ones/],
      [
        { TRAINER_LORA_RANK: '', TRAINER_LORA_ALPHA: '', TRAINER_LORA_DROPOUT: '0' },
        /a LoRA checkpoint .* but this trainer does full fine-tuning/,
      ],
    ];
    for (const [extra, refusal] of cases) {
      const h = await trainerHarness(loraEnv(dir, extra), log);
      await expect(h.trainer.start()).rejects.toThrow(refusal);
      expect(h.steps).toEqual([]);
      expect(h.published()).toEqual([]);
      expect(listing(join(root, dir))).toEqual(before);
      await h.close();
    }

    // and a LoRA trainer on a full fine-tuning run's checkpoints
    const full = await trainerHarness(
      { CHECKPOINT_DIR: join(root, 'full-ft'), TRAINER_INITIAL_CHECKPOINT_DIR: baseDir, TRAINER_CHECKPOINT_EVERY: '1' },
      log,
    );
    await full.trainAll(log.slice(0, 1));
    await full.close();
    const lora = await trainerHarness(loraEnv('full-ft'), log);
    await expect(lora.trainer.start()).rejects.toThrow(/a full fine-tuning checkpoint, but this trainer trains LoRA adapters/);
    expect(lora.steps).toEqual([]);
    await lora.close();
  });
});
