// The CUDA backend against the CPU reference (checks in cuda-checks.ts). Where there is no CUDA
// build or no GPU, the suite is skipped and its title says why: these tests are then reported as
// not run, never as passed. On the GPU machine they run through tools/device/cuda-check.mjs.
import { describe, expect, it } from 'vitest';
import { cudaAvailability, kernelChecks, modelChecks } from './cuda-checks';

const cuda = cudaAvailability();

describe.skipIf(!cuda.available)(`CUDA backend vs the CPU reference [${cuda.available ? 'on ' : 'not run: '}${cuda.reason}]`, () => {
  it('every GPU kernel matches its CPU kernel within dtype-scaled tolerances', async () => {
    const checks = await kernelChecks(1);
    expect(checks.length).toBeGreaterThan(10);
    const failed = checks.filter((c) => !c.passed).map((c) => `${c.name}: ${c.detail}`);
    expect(failed).toEqual([]);
  }, 600_000);

  it('forward, backward, tree ≡ flat and a training run match the CPU', async () => {
    const checks = await modelChecks();
    const failed = checks.filter((c) => !c.passed).map((c) => `${c.name}: ${c.detail}`);
    expect(failed).toEqual([]);
  }, 600_000);
});

describe('CUDA availability report', () => {
  it('says why the CUDA backend is or is not used', () => {
    expect(cuda.reason.length).toBeGreaterThan(10);
  });
});
