/** Small helpers shared by benchmark suites: percentiles, the readable table, synthetic packs. */
import { flatPack, type Pack, type PackSample } from '@anvil/rl';

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx];
}

export function printTable(title: string, rows: Record<string, string | number>[]): void {
  if (rows.length === 0) return;
  const cols = Object.keys(rows[0]);
  const fmt = (v: string | number) => (typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toFixed(2)) : v);
  const widths = cols.map((c) => Math.max(c.length, ...rows.map((r) => fmt(r[c] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i])).join('  ');
  console.log(`\n${title}`);
  console.log(line(cols));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const r of rows) console.log(line(cols.map((c) => fmt(r[c] ?? ''))));
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * `groups` independent groups (tasks), each of n samples sharing a prefix of P tokens with b own
 * tokens per sample (P = 0: all samples distinct), like G rollouts of several tasks or the per-turn
 * samples of agent trajectories.
 */
export function starSamples(groups: number, n: number, P: number, b: number, vocab: number, seed: number): PackSample[] {
  const out: PackSample[] = [];
  for (let g = 0; g < groups; g++) out.push(...starGroup(n, P, b, vocab, seed * 1000 + g));
  return out;
}

export function starGroup(n: number, P: number, b: number, vocab: number, seed: number): PackSample[] {
  let s = seed >>> 0;
  const tok = () => ((s = (s * 1664525 + 1013904223) >>> 0), s % vocab);
  const prefix = Array.from({ length: P }, tok);
  return Array.from({ length: n }, () => {
    const own = Array.from({ length: b }, tok);
    const seq = [...prefix, ...own];
    // the last quarter of the sample (at least one token) is the output with loss
    const out = Math.max(1, Math.floor(seq.length / 4));
    return { promptIds: seq.slice(0, seq.length - out), outputIds: seq.slice(seq.length - out) };
  });
}

/** Whole samples, in order, into flat packs of at most `max` tokens. */
export function flatPacks(samples: PackSample[], max: number): Pack[] {
  const packs: Pack[] = [];
  let cur: number[] = [],
    size = 0;
  samples.forEach((s, i) => {
    const len = s.promptIds.length + s.outputIds.length;
    if (size + len > max && cur.length) {
      packs.push(flatPack(samples, cur));
      cur = [];
      size = 0;
    }
    cur.push(i);
    size += len;
  });
  if (cur.length) packs.push(flatPack(samples, cur));
  return packs;
}
