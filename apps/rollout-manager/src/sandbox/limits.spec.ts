import { describe, expect, it } from 'vitest';
import { SANDBOX_LIMIT_DEFAULTS, sandboxLimitsOf } from './limits';

describe('sandbox limits', () => {
  it('defaults: per-process memory, processes, file size, tmpfs; CPU one core for the whole timeout; no output stop', () => {
    expect(sandboxLimitsOf({}, { wallMs: 59_998.6, timeoutMs: 60_000, outputCapBytes: 4096 })).toEqual({
      wallMs: 59_999,
      cpuSeconds: 60,
      ...SANDBOX_LIMIT_DEFAULTS,
      stdoutBytes: 4096,
      stderrBytes: 4096,
    });
  });

  it("a task set's overrides win; a clock already spent still gets a positive wall", () => {
    const l = sandboxLimitsOf(
      { cpuSeconds: 5, memoryBytes: 1 << 20, processes: 8, fileSizeBytes: 1024, tmpfsBytes: 1 << 22, outputBytes: 10 },
      { wallMs: -3, timeoutMs: 100, outputCapBytes: 1 },
    );
    expect(l).toMatchObject({
      wallMs: 1,
      cpuSeconds: 5,
      memoryBytes: 1 << 20,
      processes: 8,
      fileSizeBytes: 1024,
      tmpfsBytes: 1 << 22,
      outputBytes: 10,
    });
  });
});
