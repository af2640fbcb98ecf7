import { describe, expect, it } from 'vitest';
import { compactFilterWeight, filterConfig, FilterInputError, filterGroup, FilterRollout } from './index';

const cfg = filterConfig();
const r = (id: string, finishReason: string, reward: number | null, extra: Partial<FilterRollout> = {}): FilterRollout => ({
  rolloutId: id,
  finishReason,
  reward,
  ...extra,
});

describe('filterConfig', () => {
  it('defaults', () => {
    expect(cfg).toEqual({
      compactReasons: ['max_context', 'max_steps', 'timeout'],
      envErrorReasons: ['env_error'],
      dropReasons: ['aborted'],
      okReasons: ['completed'],
      dropZeroVariance: true,
      maxEnvRetries: 2,
      maskTruncated: false,
      minTrainable: 1,
      zeroVarianceTolerance: 1e-9,
    });
  });

  it('rejects bad values, unknown keys and a reason in two lists', () => {
    expect(() => filterConfig({ maxEnvRetries: -1 })).toThrow(/maxEnvRetries/);
    expect(() => filterConfig({ maxEnvRetries: 1.5 })).toThrow(/maxEnvRetries/);
    expect(() => filterConfig({ minTrainable: 0 })).toThrow(/minTrainable/);
    expect(() => filterConfig({ dropZeroVariance: 'yes' as never })).toThrow(/dropZeroVariance/);
    expect(() => filterConfig({ compactReasons: ['timeout', ''] })).toThrow(/compactReasons/);
    expect(() => filterConfig({ dropReasons: ['timeout'] })).toThrow(/dropReasons: finish reason 'timeout' is also in compactReasons/);
    expect(() => filterConfig({ maskTruncate: true } as never)).toThrow(FilterInputError);
  });
});

describe('compactFilterWeight', () => {
  it('max_context, max_steps and timeout weigh 0; completed weighs 1', () => {
    expect(compactFilterWeight('completed')).toBe(1);
    for (const reason of ['max_context', 'max_steps', 'timeout']) expect(compactFilterWeight(reason)).toBe(0);
    expect(compactFilterWeight('env_error')).toBe(0);
    expect(compactFilterWeight('aborted')).toBe(0);
    expect(compactFilterWeight('timeout', filterConfig({ compactReasons: ['max_context'], okReasons: ['completed', 'timeout'] }))).toBe(1);
  });

  it('an unknown finish reason is an error, not a silent 1', () => {
    expect(() => compactFilterWeight('finished')).toThrow(/finishReason: unknown finish reason 'finished'/);
  });
});

describe('filterGroup', () => {
  it('compact-filtered rollouts stay with weight 0 and are counted; their rewards do not enter the variance', () => {
    const out = filterGroup(
      [r('a', 'completed', 1), r('b', 'completed', 0), r('c', 'max_steps', 1), r('d', 'timeout', null), r('e', 'max_context', 0)],
      cfg,
    );
    expect(out.decision).toBe('keep');
    expect([...out.lossWeights]).toEqual([
      ['a', 1],
      ['b', 1],
      ['c', 0],
      ['d', 0],
      ['e', 0],
    ]);
    expect(out.counts).toMatchObject({ total: 5, trainable: 2, compactMasked: 3, zeroVariance: 0 });
  });

  it('env failures are dropped and retried while attempts ≤ maxEnvRetries (off by one: 2 retries, 3rd attempt is the last)', () => {
    const out = filterGroup(
      [
        r('a', 'completed', 1),
        r('b', 'completed', 0),
        r('e1', 'env_error', null),
        r('e2', 'env_error', null, { attempts: 2 }),
        r('e3', 'env_error', null, { attempts: 3 }),
      ],
      cfg,
    );
    expect(out.decision).toBe('keep');
    expect(out.retry).toEqual(['e1', 'e2']);
    expect(out.dropped).toEqual(['e1', 'e2', 'e3']);
    expect(out.counts).toMatchObject({ envErrors: 3, retried: 2, exhausted: 1 });
    expect(out.lossWeights.has('e1')).toBe(false);
    const none = filterGroup(
      [r('a', 'completed', 1), r('b', 'completed', 0), r('e', 'env_error', null)],
      filterConfig({ maxEnvRetries: 0 }),
    );
    expect(none.retry).toEqual([]);
    expect(none.counts.exhausted).toBe(1);
  });

  it('a group of env failures only is dropped as all_env_error, with its retries listed', () => {
    const out = filterGroup([r('e1', 'env_error', null), r('e2', 'env_error', null)], cfg);
    expect(out).toMatchObject({ decision: 'drop', reason: 'all_env_error', retry: ['e1', 'e2'] });
  });

  it('a group with nothing trainable is dropped as no_trainable', () => {
    const out = filterGroup([r('a', 'timeout', null), r('b', 'env_error', null)], cfg);
    expect(out).toMatchObject({ decision: 'drop', reason: 'no_trainable' });
    expect(out.lossWeights.get('a')).toBe(0);
  });

  it('zero variance: dropped by default and counted; kept when the filter is off', () => {
    const group = [r('a', 'completed', 0.8), r('b', 'completed', 0.8), r('c', 'max_steps', 0)];
    const on = filterGroup(group, cfg);
    expect(on).toMatchObject({ decision: 'drop', reason: 'zero_variance' });
    expect(on.counts.zeroVariance).toBe(1);
    expect([...on.lossWeights.values()]).toEqual([0, 0, 0]);
    const off = filterGroup(group, filterConfig({ dropZeroVariance: false }));
    expect(off.decision).toBe('keep');
    expect(off.counts.zeroVariance).toBe(1);
    expect(off.lossWeights.get('a')).toBe(1);
  });

  it('zero variance tolerance is a closed bound', () => {
    const c = filterConfig({ zeroVarianceTolerance: 0.25 });
    expect(filterGroup([r('a', 'completed', 0.5), r('b', 'completed', 0.75)], c).reason).toBe('zero_variance');
    expect(filterGroup([r('a', 'completed', 0.5), r('b', 'completed', 0.75 + 2 ** -20)], c).decision).toBe('keep');
  });

  it('over-long outputs are trained as they are by default, masked (weight 0, out of the variance) with maskTruncated', () => {
    const group = [r('a', 'completed', 1, { outputTruncated: true }), r('b', 'completed', 0), r('c', 'completed', 1)];
    const kept = filterGroup(group, cfg);
    expect(kept.lossWeights.get('a')).toBe(1);
    expect(kept.counts).toMatchObject({ truncatedMasked: 0, trainable: 3 });
    const masked = filterGroup(group, filterConfig({ maskTruncated: true }));
    expect(masked.lossWeights.get('a')).toBe(0);
    expect(masked.counts).toMatchObject({ truncatedMasked: 1, trainable: 2 });
    // masked, a's reward leaves the statistics: b (0) and c (1) still differ, so the group stays
    expect(masked.decision).toBe('keep');
    // ... but with c at 0 the trainable rewards are equal: zero variance although a scored 1
    expect(filterGroup([group[0], group[1], r('c', 'completed', 0)], filterConfig({ maskTruncated: true })).reason).toBe('zero_variance');
  });

  it('minTrainable drops a group with exactly one too few (off by one)', () => {
    const c = filterConfig({ minTrainable: 3 });
    expect(filterGroup([r('a', 'completed', 1), r('b', 'completed', 0), r('c', 'timeout', 1)], c).reason).toBe('too_few_trainable');
    expect(filterGroup([r('a', 'completed', 1), r('b', 'completed', 0), r('c', 'completed', 1)], c).decision).toBe('keep');
  });

  it('aborted rollouts are dropped without retry', () => {
    const out = filterGroup([r('a', 'completed', 1), r('b', 'completed', 0), r('x', 'aborted', null)], cfg);
    expect(out.dropped).toEqual(['x']);
    expect(out.retry).toEqual([]);
    expect(out.counts.droppedOther).toBe(1);
  });

  it('validation names the bad field', () => {
    expect(() => filterGroup([], cfg)).toThrow(/rollouts: must be a non-empty array/);
    expect(() => filterGroup([r('a', 'completed', null)], cfg)).toThrow(/rollouts\[0\]\.reward/);
    expect(() => filterGroup([r('a', 'completed', Number.NaN)], cfg)).toThrow(/rollouts\[0\]\.reward/);
    expect(() => filterGroup([r('a', 'completed', 1), r('a', 'completed', 0)], cfg)).toThrow(/rollouts\[1\]\.rolloutId/);
    expect(() => filterGroup([r('a', 'done', 1)], cfg)).toThrow(/rollouts\[0\]\.finishReason/);
    expect(() => filterGroup([r('a', 'env_error', null, { attempts: 0 })], cfg)).toThrow(/rollouts\[0\]\.attempts/);
    expect(() => filterGroup([r('a', 'completed', 1)], { ...cfg, maxEnvRetries: -3 })).toThrow(/maxEnvRetries/);
  });
});
