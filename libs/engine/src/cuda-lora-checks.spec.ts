// The LoRA device checks (cuda-lora-checks.ts) run on the CPU backend against itself: a test of the
// checks (they must pass there, and measure what they claim), so that a GPU run tests the GPU.
import { describe, expect, it } from 'vitest';
import { loraChecks } from './cuda-lora-checks';

describe('the LoRA device checks, run on the CPU backend', () => {
  it('pass there: identical log-probs and gradients, dropout visible, losses fall, merge and resume exact', async () => {
    const checks = await loraChecks('cpu');
    expect(checks.map((c) => c.name)).toHaveLength(5);
    const failed = checks.filter((c) => !c.passed).map((c) => `${c.name}: ${c.detail}`);
    expect(failed).toEqual([]);
    const byName = (re: RegExp) => checks.find((c) => re.test(c.name)) as (typeof checks)[number];
    expect(byName(/training forward/).metrics.maxLogpErr).toBe(0);
    expect(byName(/training forward/).metrics.dropoutEffect).toBeGreaterThan(1e-4);
    expect(byName(/backward/).metrics.worstGradRelL2).toBe(0);
    expect(byName(/AdamW steps/).metrics.lastLoss).toBeLessThan(byName(/AdamW steps/).metrics.firstLoss);
    expect(byName(/resume|saved after/).metrics.resumedMaxAbsGap).toBe(0);
  }, 120_000);
});
