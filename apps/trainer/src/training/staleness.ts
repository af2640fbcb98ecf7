import type { PrefixTree } from '@anvil/rl';

/** Versions behind `version` of the batch's output tokens (each sample's tokens, as trained). */
export function stalenessOf(tree: PrefixTree, version: number) {
  let sum = 0,
    max = 0,
    old = 0,
    n = 0;
  const histogram: number[] = [];
  for (const s of tree.samples)
    for (const node of s.outputNodes) {
      const lag = Math.max(0, version - tree.versions[node]);
      sum += lag;
      max = Math.max(max, lag);
      if (lag > 1) old++;
      n++;
      histogram[lag] = (histogram[lag] ?? 0) + 1;
    }
  return {
    staleness: { mean: n ? sum / n : 0, max, shareOlderThan1: n ? old / n : 0, tokens: n },
    stalenessHistogram: Array.from(histogram, (v) => v ?? 0),
  };
}
