import { describe, expect, it } from 'vitest';
import { seededShuffle } from './random';

describe('seededShuffle', () => {
  it('is a permutation, the same for the same seed and another for another seed', () => {
    const items = Array.from({ length: 200 }, (_, i) => i);
    const a = seededShuffle(items, 7);
    expect([...a].sort((x, y) => x - y)).toEqual(items);
    expect(seededShuffle(items, 7)).toEqual(a);
    expect(seededShuffle(items, 8)).not.toEqual(a);
    expect(a).not.toEqual(items);
    expect(items[0]).toBe(0); // the input is left as it was
  });

  it('puts every item in every place about equally often', () => {
    const counts = Array.from({ length: 4 }, () => new Array(4).fill(0) as number[]);
    for (let seed = 0; seed < 4000; seed++) seededShuffle([0, 1, 2, 3], seed).forEach((item, place) => counts[item][place]++);
    for (const row of counts) for (const c of row) expect(Math.abs(c - 1000)).toBeLessThan(120);
  });
});
