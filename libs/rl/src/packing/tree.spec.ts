import { describe, expect, it } from 'vitest';
import { seededRandom } from '../random';
import { packSamples } from './budget';
import { PackingError } from './trie';
import { packTree, prefixTreeOf, validatePrefixTree, type PrefixTree } from './tree';

/** A group of multi-turn trajectories: each call's prompt extends the previous call's prompt + output. */
function trajectories(seed: number, nTraj: number, turns: number) {
  const rand = seededRandom(seed);
  const tok = () => 1 + Math.floor(rand() * 50);
  const system = Array.from({ length: 12 }, tok);
  const out = [];
  for (let t = 0; t < nTraj; t++) {
    let ctx = [...system, ...Array.from({ length: 3 }, tok)];
    for (let c = 0; c < turns; c++) {
      const outputIds = Array.from({ length: 1 + Math.floor(rand() * 5) }, tok);
      out.push({
        sampleId: `t${t}c${c}`,
        trajectoryId: `t${t}`,
        groupId: 'g',
        advantage: rand() - 0.5,
        lossWeight: t % 3 === 0 ? 0 : 1,
        promptIds: [...ctx],
        outputIds,
        behaviourLogp: outputIds.map(() => -rand()),
        versions: outputIds.map(() => c),
      });
      ctx = [...ctx, ...outputIds, ...Array.from({ length: 2 }, tok)];
    }
  }
  return out;
}

/** Tokens on the path from the root to a pack node (inclusive). */
function pathTokens(tokens: Int32Array, parents: Int32Array, node: number): number[] {
  const p: number[] = [];
  for (let i = node; i >= 0; i = parents[i]) p.push(tokens[i]);
  return p.reverse();
}

describe('packTree', () => {
  const samples = trajectories(3, 6, 5);
  const tree = prefixTreeOf(samples);

  it('the tree of materialised samples has the trie packer’s node count and records behaviour logprobs per output node', () => {
    const ref = packSamples(
      samples.map((s) => ({ promptIds: s.promptIds, outputIds: s.outputIds })),
      { maxTokens: 1 << 20 },
    );
    expect(tree.tokens.length).toBe(ref.uniqueTokens);
    samples.forEach((s, k) => {
      expect(Array.from(tree.samples[k].outputNodes, (j) => tree.behaviourLogp[j])).toEqual(Array.from(Float32Array.from(s.behaviourLogp)));
      expect(Array.from(tree.samples[k].outputNodes, (j) => tree.versions[j])).toEqual(s.versions);
    });
  });

  for (const budget of [1 << 20, 200, 90, 60]) {
    it(`budget ${budget}: every sample's path in its pack spells prompt + output, packs stay in budget and in pre-order`, () => {
      const r = packTree(tree, { maxTokens: budget });
      if (budget === 1 << 20) {
        expect(r.packs.length).toBe(1);
        expect(r.uniqueTokens).toBe(tree.tokens.length);
      }
      for (const p of r.packs) {
        expect(p.tokens.length).toBeLessThanOrEqual(budget);
        p.parents.forEach((q, j) => expect(q).toBeLessThan(j));
      }
      samples.forEach((s, k) => {
        const loc = r.locations[k];
        const pack = r.packs[loc.pack];
        const outs = loc.outputNodes;
        expect(pathTokens(pack.tokens, pack.parents, outs[outs.length - 1])).toEqual([...s.promptIds, ...s.outputIds]);
        expect(Array.from(outs, (j) => pack.tokens[j])).toEqual(s.outputIds);
        // nodeOf maps back to the tree node holding the same behaviour record
        expect(Array.from(outs, (j) => tree.behaviourLogp[r.nodeOf[loc.pack][j]])).toEqual(Array.from(Float32Array.from(s.behaviourLogp)));
      });
      const total = samples.reduce((a, s) => a + s.promptIds.length + s.outputIds.length, 0);
      expect(r.totalTokens).toBe(total);
      expect(r.sharing).toBeCloseTo(1 - r.uniqueTokens / total, 12);
    });
  }

  it('a shared node carries the summed loss weights of the samples that output it', () => {
    const dup = prefixTreeOf([samples[6], { ...samples[6], sampleId: 'copy', lossWeight: 0.5 }]);
    const r = packTree(dup, { maxTokens: 1000 });
    const outs = r.locations[0].outputNodes;
    for (const j of outs) expect(r.packs[0].lossWeights[j]).toBeCloseTo(1.5, 6);
  });

  it('refuses a sample longer than the budget and a malformed tree, naming the field', () => {
    expect(() => packTree(tree, { maxTokens: 10 })).toThrow(/more than the pack budget/);
    expect(() => packTree(tree, { maxTokens: 0 })).toThrow(PackingError);
    const bad: PrefixTree = { ...tree, parents: Int32Array.from(tree.parents, (p, i) => (i === 5 ? 7 : p)) };
    expect(() => validatePrefixTree(bad)).toThrow(/parents\[5\]/);
    const short: PrefixTree = { ...tree, versions: new Uint32Array(3) };
    expect(() => packTree(short, { maxTokens: 100 })).toThrow(/versions has 3 entries/);
    const gap: PrefixTree = { ...tree, samples: [{ ...tree.samples[0], outputNodes: Int32Array.of(tree.samples[0].outputNodes[0], 0) }] };
    expect(() => packTree(gap, { maxTokens: 100 })).toThrow(/not the child/);
  });
});
