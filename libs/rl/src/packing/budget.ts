// Splitting a batch into packs under a token budget without cutting shared prefixes more than
// necessary: samples are grouped by trie (same root token); a trie that fits is never split;
// one that does not is cut into sub-tries along its lexicographic (DFS) order, so each sub-trie
// holds neighbouring branches and repeats only the prefix they share; then whole units are
// bin-packed (first-fit decreasing) into packs.
import { buildPack, Pack, PackingError, PackSample, sampleLength } from './trie';

export interface PackingOptions {
  /** Maximum nodes per pack. A single sample longer than this is an error. */
  maxTokens: number;
}

export interface PackingResult {
  packs: Pack[];
  /** For each input sample: the pack it went to and the node index of each of its output tokens. */
  locations: Array<{ pack: number; outputNodes: Int32Array }>;
  totalTokens: number;
  uniqueTokens: number;
  /** 1 - unique / total over the whole batch. */
  sharing: number;
}

function tokenAt(s: PackSample, k: number): number {
  const p = s.promptIds.length;
  return k < p ? s.promptIds[k] : s.outputIds[k - p];
}

function lcp(a: PackSample, b: PackSample): number {
  const n = Math.min(sampleLength(a), sampleLength(b));
  let k = 0;
  while (k < n && tokenAt(a, k) === tokenAt(b, k)) k++;
  return k;
}

function compareSamples(a: PackSample, b: PackSample): number {
  const k = lcp(a, b);
  const la = sampleLength(a),
    lb = sampleLength(b);
  if (k === la || k === lb) return la - lb;
  return tokenAt(a, k) - tokenAt(b, k);
}

export function packSamples(samples: readonly PackSample[], opts: PackingOptions): PackingResult {
  const budget = opts.maxTokens;
  if (!Number.isInteger(budget) || budget < 1) throw new PackingError(`maxTokens must be a positive integer, got ${budget}`);
  if (samples.length === 0) throw new PackingError('no samples to pack');
  samples.forEach((s, i) => {
    if (!s || !s.promptIds || !s.outputIds) throw new PackingError(`sample ${i}: promptIds and outputIds are required`);
    const len = sampleLength(s);
    if (len > budget)
      throw new PackingError(`sample ${i} has ${len} tokens, more than the pack budget maxTokens = ${budget}; it cannot be packed`);
    if (len === 0) throw new PackingError(`sample ${i} is empty`);
  });
  // 1. sort all samples in trie (DFS) order; samples of one trie are then contiguous
  const order = samples.map((_, i) => i).sort((a, b) => compareSamples(samples[a], samples[b]) || a - b);
  // 2. walk the order, cutting units at root changes and where a trie would overflow the budget.
  //    The nodes a sample adds to a unit = its length - LCP with its predecessor in DFS order.
  const units: Array<{ members: number[]; size: number }> = [];
  let cur: { members: number[]; size: number } | null = null;
  let prev: PackSample | null = null;
  for (const i of order) {
    const s = samples[i];
    const sameRoot = prev !== null && tokenAt(prev, 0) === tokenAt(s, 0);
    const shared = cur && prev !== null && sameRoot ? lcp(prev, s) : 0;
    const cost = sampleLength(s) - shared;
    if (!cur || !sameRoot) {
      cur = { members: [i], size: sampleLength(s) };
      units.push(cur);
    } else if (cur.size + cost > budget) {
      cur = { members: [i], size: sampleLength(s) }; // a new sub-trie repeats only this sample's prefix
      units.push(cur);
    } else {
      cur.members.push(i);
      cur.size += cost;
    }
    prev = s;
  }
  // 3. first-fit decreasing of whole units into packs
  const bins: Array<{ members: number[]; size: number }> = [];
  const byUnitSize = units.map((u, k) => k).sort((a, b) => units[b].size - units[a].size || a - b);
  for (const k of byUnitSize) {
    const u = units[k];
    const bin = bins.find((b) => b.size + u.size <= budget);
    if (bin) {
      bin.members.push(...u.members);
      bin.size += u.size;
    } else bins.push({ members: [...u.members], size: u.size });
  }
  // 4. build each pack as one trie (units of the same root in one pack merge further)
  const packs = bins.map((b) => buildPack(samples, b.members));
  const locations: PackingResult['locations'] = new Array(samples.length);
  packs.forEach((p, pi) => p.samples.forEach((si, k) => (locations[si] = { pack: pi, outputNodes: p.outputNodes[k] })));
  const totalTokens = packs.reduce((a, p) => a + p.totalTokens, 0);
  const uniqueTokens = packs.reduce((a, p) => a + p.uniqueTokens, 0);
  return { packs, locations, totalTokens, uniqueTokens, sharing: 1 - uniqueTokens / totalTokens };
}
