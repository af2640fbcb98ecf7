import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { anvilTrain } from '@anvil/testing';

/**
 * The learning test: `anvil train` (`npm run main`, the embedded default, its own warm start included) on a fresh
 * data directory must raise held-out success at the end of RL by 15 points over the warm start's (same
 * tasks, same sampler seeds), and keep the train/inference mismatch of the tokens the current version generated within bounds (a
 * peer's CI fails when the mean KL over its last steps exceeds 0.15; the embedded engine both
 * generates and trains, so ours is a measure of the engine itself and is held to 1e-5 in |Δlogp|).
 */
const dataDir = mkdtempSync(join(tmpdir(), 'anvil-main-learns-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe('anvil train (npm run main)', () => {
  it(
    'learns: held-out success after RL is above the warm start, the mismatch stays at the engine level, the report is written',
    { timeout: 2_700_000 },
    async () => {
      const configFile = join(dataDir, 'run.json');
      writeFileSync(configFile, JSON.stringify({ dataDir, seed: 1 }));
      const { code, both: out } = await anvilTrain(configFile);
      const lines = out.trim().split('\n');
      // What the run reached, in the test log whether it passes or not (the evaluations, the summary).
      console.log(lines.filter((l) => /^(warm start: (built|cached|step \d+:)|held-out|\{)/.test(l)).join('\n'));
      expect(code, out.slice(-4000)).toBe(0);
      const summary = JSON.parse(lines[lines.length - 1]) as {
        heldOutSuccess: { warmStart: number; final: number };
        seed: number;
        wallClockSeconds: number;
        rlSteps: number;
        finalVersion: number;
        warmStart: { cached: boolean; sftSteps: number };
        mismatch: { meanAbsDeltaLogp: number; klK3: number; tokens: number };
      };
      expect(summary.seed).toBe(1);
      expect(summary.warmStart.cached).toBe(false);
      expect(summary.rlSteps).toBe(120);
      expect(summary.finalVersion).toBe(120);
      expect(summary.heldOutSuccess.warmStart).toBeGreaterThan(0.1);
      // every evaluation is pinned to one version: "held-out success N% at policy version V"
      const evals = [...out.matchAll(/^held-out success ([\d.]+)% at policy version (\d+)/gm)].map((m) => ({
        percent: m[1],
        version: Number(m[2]),
      }));
      expect(evals[0]).toEqual({ percent: (summary.heldOutSuccess.warmStart * 100).toFixed(1), version: 0 });
      expect(evals.map((e) => e.version)).toEqual([0, 60, 120]);
      // Every evaluation runs 4 samples of each of the 100 held-out tasks with the same sampler seeds per
      // (task, sample), so the warm start and the RL-trained policy are compared on paired samples: the
      // noise on their difference is about 2.5 to 3 points, where one unpaired 100-sample evaluation moved by ±5.
      // The default run gained +38.5 to +45.8 on seeds 1-3 (2026-12-05: 120 batches of 8 AdamW steps each,
      // adaptive window, CISPO mask), +35.3 to +48.8 in nine runs with the defaults of 2026-12-04 and +14.2 to
      // +22.5 with one step a batch the day before: the bar for every seed, +15 points, is far outside
      // that noise and well under what the default reaches. Fresh-clone runs of this test (seed 1, warm start
      // built) gained less and varied more: +40, +43, +32.3, +35.3, +7.5, +24.8, +30.3 (2026-12-04).
      expect(summary.heldOutSuccess.final, out.slice(-4000)).toBeGreaterThanOrEqual(summary.heldOutSuccess.warmStart + 0.15);
      expect(out).toMatch(/held-out evaluation of the warm start \(100 tasks x 4 samples, temperature 1\)/);
      // Measured only in each batch's mini-batches trained before its first AdamW step (one group of eight with
      // the default): 860 tokens in a seed-1 run on 2026-12-04, most of them step 1's (12-16 thousand with one step a batch).
      expect(summary.mismatch.tokens).toBeGreaterThan(200);
      expect(summary.mismatch.klK3).toBeLessThan(0.15);
      expect(summary.mismatch.meanAbsDeltaLogp).toBeLessThan(1e-5);
      const report = out.match(/^report: (.+)$/m)?.[1];
      expect(report && existsSync(report)).toBe(true);
    },
  );
});
