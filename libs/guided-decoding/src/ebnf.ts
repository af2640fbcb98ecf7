import { compileGrammar, type GrammarNode } from './grammar';
import type { Nfa } from './nfa/nfa';

/**
 * A grammar as the EBNF that vLLM (`structured_outputs.grammar`) and SGLang (`ebnf` in
 * sampling_params) compile with xgrammar: W3C-style `name ::= ...` rules, double-quoted string
 * literals and `[...]` character classes with C-style `\uXXXX` / `\UXXXXXXXX` escapes. Written
 * from the same automaton the embedded engine walks (compiled without a vocabulary, so literal
 * text is characters; those engines match added tokens by their text), as a right-linear grammar:
 * one rule per automaton state, `state ::= [class] next | ... | ""` (`""` where the output may
 * end). So every backend enforces exactly the same language, whitespace included.
 */
export function toEbnf(grammar: GrammarNode): string {
  return nfaToEbnf(compileGrammar(grammar, { addedTokens: null }));
}

export function nfaToEbnf(nfa: Nfa): string {
  const closures = new Map<string, { name: string; set: number[] }>();
  const lines: string[] = [];
  const queue: number[] = [];
  const named = new Set<number>();
  /** The rule for the epsilon closure of `states` (created on first use). */
  const closureRule = (states: number[]): string => {
    const set = closure(nfa, states);
    const key = set.join(',');
    let c = closures.get(key);
    if (!c) {
      c = { name: `c${closures.size}`, set };
      closures.set(key, c);
      const alts = set.map((u) => (u === nfa.final ? '""' : `s${u}`));
      lines.push(`${c.name} ::= ${alts.length > 0 ? alts.join(' | ') : '""'}`);
      for (const u of set) if (u !== nfa.final && !named.has(u)) queue.push(u);
    }
    return c.name;
  };
  lines.push('');
  lines[0] = `root ::= ${closureRule([nfa.start])}`;
  while (queue.length > 0) {
    const u = queue.shift() as number;
    if (named.has(u)) continue;
    named.add(u);
    // group code point ranges by target closure
    const byTarget = new Map<string, number[]>();
    const r = nfa.ranges[u];
    for (let i = 0; i < r.length; i += 3) {
      const target = closureRule([r[i + 2]]);
      const list = byTarget.get(target) ?? [];
      list.push(r[i], r[i + 1]);
      byTarget.set(target, list);
    }
    const alts: string[] = [];
    for (const [target, ranges] of byTarget) alts.push(`${charClass(ranges)} ${target}`);
    const y = nfa.syms[u];
    for (let i = 0; i < y.length; i += 2) alts.push(`${literal(nfa.symbols[y[i]])} ${closureRule([y[i + 1]])}`);
    lines.push(`s${u} ::= ${alts.join(' | ')}`);
  }
  return lines.join('\n') + '\n';
}

/** Epsilon closure keeping states with edges (and the final state) that can still finish, sorted. */
function closure(nfa: Nfa, from: number[]): number[] {
  const seen = new Set<number>();
  const stack = [...from];
  const kept: number[] = [];
  while (stack.length > 0) {
    const u = stack.pop() as number;
    if (seen.has(u)) continue;
    seen.add(u);
    if (!Number.isFinite(nfa.dist[u])) continue;
    if (nfa.ranges[u].length > 0 || nfa.syms[u].length > 0 || u === nfa.final) kept.push(u);
    for (const v of nfa.eps[u]) stack.push(v);
  }
  return kept.sort((a, b) => a - b);
}

const hex = (cp: number) => (cp <= 0xffff ? `\\u${cp.toString(16).padStart(4, '0')}` : `\\U${cp.toString(16).padStart(8, '0')}`);

/** `[...]` of flat (lo, hi) ranges, merged and escaped. */
function charClass(flat: number[]): string {
  const pairs: [number, number][] = [];
  for (let i = 0; i < flat.length; i += 2) pairs.push([flat[i], flat[i + 1]]);
  pairs.sort((a, b) => a[0] - b[0]);
  const merged: [number, number][] = [];
  for (const p of pairs) {
    const last = merged[merged.length - 1];
    if (last && p[0] <= last[1] + 1) last[1] = Math.max(last[1], p[1]);
    else merged.push([p[0], p[1]]);
  }
  return `[${merged.map(([lo, hi]) => (lo === hi ? hex(lo) : `${hex(lo)}-${hex(hi)}`)).join('')}]`;
}

/** A double-quoted literal with every non-printable-ASCII character escaped. */
function literal(text: string): string {
  let out = '"';
  for (const ch of text) {
    const c = ch.codePointAt(0) as number;
    out += c >= 0x20 && c < 0x7f && ch !== '"' && ch !== '\\' ? ch : hex(c);
  }
  return `${out}"`;
}
