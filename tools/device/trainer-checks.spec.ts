import { describe, expect, it } from 'vitest';
import { trainerChecks } from './trainer-checks';

// The GPU machine runs these on the CUDA backend (tools/device/run-gpu.sh); here both sides are
// the CPU backend, which checks the checks: identical losses, a bitwise resume, a batch that moves.
describe('trainer GPU checks, run on the CPU backend', () => {
  it('all pass, with equal losses and a bitwise resume after a full checkpoint', async () => {
    const results = await trainerChecks('cpu');
    expect(results.map((r) => r.name)).toHaveLength(3);
    expect(results.filter((r) => !r.passed)).toEqual([]);
    expect(results[0].detail).toMatch(/worst gap 0\.00e\+0/);
    expect(results[2].detail).toMatch(/max \|resumed - uninterrupted\| 0\.00e\+0/);
  }, 120_000);
});
