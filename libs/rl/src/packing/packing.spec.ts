import { describe, expect, it } from 'vitest';
import { buildPack, flatPack, mergeSampleValues, Pack, PackingError, packSamples, PackSample, unmergeNodeValues } from './index';

/** The token sequence of the root-to-node path ending at `node`. */
function pathTokens(pack: Pack, node: number): number[] {
  const out: number[] = [];
  for (let a = node; a >= 0; a = pack.parents[a]) out.push(pack.tokens[a]);
  return out.reverse();
}

/** Every sample must be recoverable exactly from its output nodes (trie semantics). */
function expectRecoverable(pack: Pack, samples: readonly PackSample[]) {
  pack.samples.forEach((si, k) => {
    const s = samples[si];
    const full = [...Array.from(s.promptIds), ...Array.from(s.outputIds)];
    const nodes = pack.outputNodes[k];
    expect(nodes.length).toBe(s.outputIds.length);
    nodes.forEach((node, t) => expect(pathTokens(pack, node)).toEqual(full.slice(0, s.promptIds.length + t + 1)));
  });
}

function expectPreOrder(pack: Pack) {
  // parents precede children, and every subtree is a contiguous range (DFS pre-order)
  const n = pack.tokens.length;
  const end = new Int32Array(n).map((_, i) => i + 1);
  for (let i = n - 1; i >= 0; i--) {
    expect(pack.parents[i]).toBeLessThan(i);
    if (pack.parents[i] >= 0) end[pack.parents[i]] = Math.max(end[pack.parents[i]], end[i]);
  }
  for (let i = 0; i < n; i++)
    for (let j = i + 1; j < end[i]; j++) {
      let a = j;
      while (a > i) a = pack.parents[a];
      expect(a).toBe(i);
    }
}

const rand = (seed: number) => () => ((seed = (seed * 1664525 + 1013904223) >>> 0), seed / 2 ** 32);

describe('prefix-tree packer', () => {
  it('shares nodes only for identical whole prefixes', () => {
    const samples: PackSample[] = [
      { promptIds: [1, 2, 3], outputIds: [4] },
      { promptIds: [1, 2, 3], outputIds: [5, 6] },
      { promptIds: [9, 2, 3], outputIds: [4] }, // same tokens at the same depths, different prefix
      { promptIds: [1, 7, 3], outputIds: [4] },
    ];
    const p = buildPack(samples);
    // 1-2-3-{4, 5-6} = 6, 9-2-3-4 = 4, 7-3-4 under 1 = 3
    expect(p.uniqueTokens).toBe(13);
    expect(p.totalTokens).toBe(4 + 5 + 4 + 4);
    expect(p.sharing).toBeCloseTo(1 - 13 / 17);
    expect(Array.from(p.parents).filter((x) => x < 0).length).toBe(2); // roots 1 and 9
    expectRecoverable(p, samples);
    expectPreOrder(p);
  });

  it('sums loss weights of samples sharing a node; prompt tokens weigh 0', () => {
    const samples: PackSample[] = [
      { promptIds: [1, 2], outputIds: [3, 4], weights: [1, 2] },
      { promptIds: [1, 2, 3], outputIds: [4, 5], weights: [0.5, 1] }, // 3 is prompt here, output above
      { promptIds: [1], outputIds: [2, 3, 4] }, // default weight 1
    ];
    const p = buildPack(samples);
    const byPath = new Map<string, number>();
    for (let i = 0; i < p.uniqueTokens; i++) byPath.set(pathTokens(p, i).join(','), p.lossWeights[i]);
    expect(byPath.get('1')).toBe(0);
    expect(byPath.get('1,2')).toBe(1);
    expect(byPath.get('1,2,3')).toBe(1 + 0 + 1);
    expect(byPath.get('1,2,3,4')).toBe(2 + 0.5 + 1);
    expect(byPath.get('1,2,3,4,5')).toBe(1);
  });

  it('unmerge and merge map per-sample values through the shared nodes', () => {
    const samples: PackSample[] = [
      { promptIds: [1, 2], outputIds: [3, 4] },
      { promptIds: [1, 2], outputIds: [3, 5] },
    ];
    const p = buildPack(samples);
    const nodeVals = Float32Array.from({ length: p.uniqueTokens }, (_, i) => i * 10);
    const per = unmergeNodeValues(p, nodeVals);
    expect(per[0][0]).toBe(per[1][0]); // shared node "3"
    const merged = mergeSampleValues(p, [
      [1, 2],
      [4, 8],
    ]);
    expect(merged[p.outputNodes[0][0]]).toBe(5); // 1 + 4 on the shared node
    expect(merged[p.outputNodes[0][1]]).toBe(2);
    expect(merged[p.outputNodes[1][1]]).toBe(8);
    expect(merged.reduce((a, b) => a + b, 0)).toBe(15);
    const f = flatPack(samples);
    expect(f.uniqueTokens).toBe(8);
    expect(f.sharing).toBe(0);
    expectRecoverable(f, samples);
  });

  it('rejects invalid samples with specific errors', () => {
    expect(() => buildPack([])).toThrow(/no samples/);
    expect(() => buildPack([{ promptIds: [], outputIds: [1] }])).toThrow(/empty prompt/);
    expect(() => buildPack([{ promptIds: [1], outputIds: [-2] }])).toThrow(/outputIds\[0\] = -2/);
    expect(() => buildPack([{ promptIds: [1.5], outputIds: [2] }])).toThrow(/promptIds\[0\] = 1.5/);
    expect(() => buildPack([{ promptIds: [1], outputIds: [2, 3], weights: [1] }])).toThrow(/weights has 1 entries for 2/);
    expect(() => buildPack([{ promptIds: [1], outputIds: [2], weights: [NaN] }])).toThrow(/not finite/);
    expect(() => mergeSampleValues(buildPack([{ promptIds: [1], outputIds: [2] }]), [[1, 2]])).toThrow(PackingError);
  });

  describe('token budgets', () => {
    it('keeps a trie that fits whole and bin-packs tries into packs', () => {
      const samples: PackSample[] = [
        { promptIds: [1, 2, 3, 4], outputIds: [5] },
        { promptIds: [1, 2, 3, 4], outputIds: [6] },
        { promptIds: [7, 8], outputIds: [9] },
        { promptIds: [10, 11, 12], outputIds: [13, 14] },
      ];
      const r = packSamples(samples, { maxTokens: 8 });
      for (const p of r.packs) expect(p.uniqueTokens).toBeLessThanOrEqual(8);
      // the 1-2-3-4 trie (6 nodes) is never split
      const packOf = (i: number) => r.locations[i].pack;
      expect(packOf(0)).toBe(packOf(1));
      expect(r.packs.length).toBe(2);
      expect(r.uniqueTokens).toBe(6 + 3 + 5);
      r.packs.forEach((p) => {
        expectRecoverable(p, samples);
        expectPreOrder(p);
      });
    });

    it('splits an oversized trie into sub-tries that repeat only the prefix they need', () => {
      // a 40-token shared prefix with 10 branches of 10 tokens: 140 nodes as one trie
      const prefix = Array.from({ length: 40 }, (_, i) => i);
      const samples: PackSample[] = Array.from({ length: 10 }, (_, b) => ({
        promptIds: prefix,
        outputIds: Array.from({ length: 10 }, (_, k) => 100 + b * 10 + k),
      }));
      const r = packSamples(samples, { maxTokens: 75 });
      for (const p of r.packs) expect(p.uniqueTokens).toBeLessThanOrEqual(75);
      // 75 fits the prefix plus 3 branches: ceil(10 / 3) = 4 sub-tries, each repeating the prefix once
      expect(r.packs.length).toBe(4);
      expect(r.uniqueTokens).toBe(4 * 40 + 100);
      r.packs.forEach((p) => expectRecoverable(p, samples));
      expect(r.locations.every((l) => l !== undefined)).toBe(true);
    });

    it('random batches: every pack within budget, every sample recoverable, sharing consistent', () => {
      const r = rand(3);
      const samples: PackSample[] = [];
      for (let i = 0; i < 60; i++) {
        const base = samples.length && r() < 0.7 ? samples[Math.floor(r() * samples.length)] : null;
        const seq = base
          ? [...Array.from(base.promptIds), ...Array.from(base.outputIds)].slice(0, 1 + Math.floor(r() * 20))
          : [Math.floor(r() * 5)];
        const out = Array.from({ length: 1 + Math.floor(r() * 8) }, () => Math.floor(r() * 50));
        samples.push({ promptIds: seq, outputIds: out });
      }
      for (const budget of [30, 64, 200, 10000]) {
        const res = packSamples(samples, { maxTokens: budget });
        const seen = new Set<number>();
        res.packs.forEach((p) => {
          expect(p.uniqueTokens).toBeLessThanOrEqual(budget);
          expectRecoverable(p, samples);
          expectPreOrder(p);
          p.samples.forEach((s) => seen.add(s));
        });
        expect(seen.size).toBe(samples.length);
        expect(res.sharing).toBeCloseTo(1 - res.uniqueTokens / res.totalTokens);
        if (budget === 10000) expect(res.uniqueTokens).toBe(buildPack(samples).uniqueTokens);
      }
    });

    it('a sample longer than the budget is an error', () => {
      expect(() => packSamples([{ promptIds: [1, 2, 3], outputIds: [4, 5] }], { maxTokens: 4 })).toThrow(
        /sample 0 has 5 tokens, more than the pack budget maxTokens = 4/,
      );
      expect(() => packSamples([{ promptIds: [1], outputIds: [2] }], { maxTokens: 0 })).toThrow(/maxTokens must be a positive integer/);
    });
  });
});
