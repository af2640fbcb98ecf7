import { describe, expect, it } from 'vitest';
import { delaySampler, validateToolDelay } from './tool-delay';

describe('tool delay', () => {
  it('pareto is heavy-tailed, capped and seeded', () => {
    const d = { kind: 'pareto' as const, scaleMs: 100, alpha: 1.2, capMs: 120_000 };
    const s = delaySampler(d, 3);
    const xs = Array.from({ length: 20_000 }, s).sort((a, b) => a - b);
    expect(xs[0]).toBeGreaterThanOrEqual(100);
    expect(xs[xs.length - 1]).toBeLessThanOrEqual(120_000);
    const median = xs[10_000];
    const p999 = xs[19_980];
    // Pareto(α=1.2): median = 100·2^(1/1.2) ≈ 178; p99.9 ≈ 100·1000^(1/1.2) ≈ 31600
    expect(median).toBeGreaterThan(150);
    expect(median).toBeLessThan(210);
    expect(p999 / median).toBeGreaterThan(50);
    expect(Array.from({ length: 5 }, delaySampler(d, 3))).toEqual(Array.from({ length: 5 }, delaySampler(d, 3)));
    expect(Array.from({ length: 5 }, delaySampler(d, 4))).not.toEqual(Array.from({ length: 5 }, delaySampler(d, 3)));
  });
  it('lognormal median, none is zero, bad knobs named', () => {
    const s = delaySampler({ kind: 'lognormal', medianMs: 50, sigma: 1.5, capMs: 1e6 }, 1);
    const xs = Array.from({ length: 20_001 }, s).sort((a, b) => a - b);
    expect(xs[10_000]).toBeGreaterThan(45);
    expect(xs[10_000]).toBeLessThan(55);
    expect(delaySampler({ kind: 'none' }, 1)()).toBe(0);
    expect(() => validateToolDelay({ kind: 'lognormal', medianMs: 0, sigma: 1, capMs: 1 })).toThrow(/toolDelay.medianMs/);
    expect(() => validateToolDelay({ kind: 'gamma' } as never)).toThrow(/toolDelay.kind/);
  });
});
