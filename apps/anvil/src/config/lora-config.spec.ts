import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { tinyConfig, toHfConfig } from '@anvil/engine';
import { parseRunConfig, RunConfigError } from './run-config';
import { checkLoraShape } from './run-files';

const issuesOf = (input: unknown): string[] => {
  try {
    parseRunConfig(input);
  } catch (e) {
    if (e instanceof RunConfigError) return e.issues;
    throw e;
  }
  return [];
};

describe('algorithm.lora and algorithm.publish', () => {
  const work = mkdtempSync(join(tmpdir(), 'anvil-lora-config-'));
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it('absent: full fine-tuning, versions published whole; present: rank, alpha, optional dropout and targets', () => {
    const plain = parseRunConfig({});
    expect(plain.algorithm.lora).toBeUndefined();
    expect(plain.algorithm.publish).toBe('merged');
    const c = parseRunConfig({
      algorithm: { lora: { rank: 16, alpha: 32, dropout: 0.05, targets: ['q_proj', 'down_proj'] }, publish: 'adapter' },
    });
    expect(c.algorithm).toMatchObject({
      lora: { rank: 16, alpha: 32, dropout: 0.05, targets: ['q_proj', 'down_proj'] },
      publish: 'adapter',
    });
  });

  it('refuses a bad LoRA configuration with the run config, every problem at once', () => {
    expect(issuesOf({ algorithm: { lora: { rank: 0, alpha: -1, dropout: 1, targets: ['lm_head'], scale: 2 } } })).toEqual([
      expect.stringMatching(/^algorithm\.lora\.rank: /),
      expect.stringMatching(/^algorithm\.lora\.alpha: /),
      expect.stringMatching(/^algorithm\.lora\.dropout: /),
      expect.stringMatching(/^algorithm\.lora\.targets\.0: .*"q_proj"/),
      expect.stringMatching(/^algorithm\.lora: Unrecognized key: "scale"/),
    ]);
    expect(issuesOf({ algorithm: { lora: { rank: 8 } } })).toEqual([expect.stringMatching(/^algorithm\.lora\.alpha: /)]);
    expect(issuesOf({ algorithm: { publish: 'adapter' } })).toEqual([
      "algorithm.publish: 'adapter' needs algorithm.lora (full fine-tuning publishes whole models)",
    ]);
    expect(issuesOf({ algorithm: { lora: { rank: 8, alpha: 16 }, publish: 'delta' } })).toEqual([
      expect.stringMatching(/^algorithm\.publish: /),
    ]);
  });

  it("checks the rank against the starting model's projections before anything starts: the tiny model's, or a directory's config.json", () => {
    // tiny: k_proj and v_proj map 128 -> 64 features
    expect(checkLoraShape(parseRunConfig({ algorithm: { lora: { rank: 64, alpha: 8 } } }))).toEqual([]);
    expect(checkLoraShape(parseRunConfig({ algorithm: { lora: { rank: 65, alpha: 8 } } }))).toEqual([
      "algorithm.lora: rank 65 is out of range for k_proj (128 -> 64 features): it must be in [1, 64]; rank 65 is out of range for v_proj (128 -> 64 features): it must be in [1, 64] (the model's projections)",
    ]);
    expect(checkLoraShape(parseRunConfig({ algorithm: { lora: { rank: 65, alpha: 8, targets: ['q_proj'] } } }))).toEqual([]);
    const dir = join(work, 'model');
    mkdirSync(dir);
    writeFileSync(
      join(dir, 'config.json'),
      JSON.stringify(toHfConfig(tinyConfig({ hiddenSize: 32, numAttentionHeads: 2, numKeyValueHeads: 1 }))),
    );
    const user = (rank: number) =>
      parseRunConfig({ model: dir, warmStart: { enabled: false }, algorithm: { lora: { rank, alpha: 8, targets: ['o_proj'] } } });
    expect(checkLoraShape(user(32))).toEqual([]);
    expect(checkLoraShape(user(33))).toEqual([
      expect.stringMatching(/^algorithm\.lora: rank 33 is out of range for o_proj \(32 -> 32 features\)/),
    ]);
  });
});
