import { describe, expect, it } from 'vitest';
import { Coalescer } from './coalescer';

describe('Coalescer', () => {
  it('answers the callers of one tick with one call, each with its own answer, in order; a full batch goes at once', async () => {
    const calls: number[][] = [];
    const c = new Coalescer<number, number>(
      async (xs) => {
        calls.push(xs);
        return xs.map((x) => ({ status: 'fulfilled' as const, value: x * 10 }));
      },
      { lingerMs: 5, maxBatch: 3 },
    );
    const answers = await Promise.all([1, 2, 3, 4, 5].map((x) => c.push(x)));
    expect(answers).toEqual([10, 20, 30, 40, 50]);
    expect(calls).toEqual([
      [1, 2, 3],
      [4, 5],
    ]);
  });

  it('a failed batch rejects every caller in it; a failed item rejects only its caller', async () => {
    let fail = true;
    const c = new Coalescer<string, string>(async (xs) => {
      if (fail) throw new Error('down');
      return xs.map((x) =>
        x === 'bad'
          ? { status: 'rejected' as const, reason: new Error('bad item') }
          : { status: 'fulfilled' as const, value: x.toUpperCase() },
      );
    });
    const failed = await Promise.allSettled([c.push('a'), c.push('b')]);
    expect(failed.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    fail = false;
    const mixed = await Promise.allSettled([c.push('a'), c.push('bad'), c.push('c')]);
    expect(mixed).toEqual([
      { status: 'fulfilled', value: 'A' },
      { status: 'rejected', reason: new Error('bad item') },
      { status: 'fulfilled', value: 'C' },
    ]);
  });
});
