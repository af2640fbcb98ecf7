import { GrammarError } from '../errors';

/**
 * A nondeterministic automaton over Unicode code points and symbols (added tokens such as
 * `</tool_call>`, which a tokenizer emits as one id and never spells out of bytes).
 *
 * State s has code-point edges `ranges[s]` as flat (lo, hi, to) triples (inclusive ranges), symbol
 * edges `syms[s]` as (symbol, to) pairs and epsilon edges `eps[s]`. One start, one final state.
 * Code points, not bytes: the grammar is written in characters (and exported as EBNF in
 * characters); the byte-level view a tokenizer's vocabulary needs is the DFA's job (dfa.ts).
 */
export interface Nfa {
  readonly ranges: readonly (readonly number[])[];
  readonly syms: readonly (readonly number[])[];
  readonly eps: readonly (readonly number[])[];
  readonly start: number;
  readonly final: number;
  /** Symbol index -> the added token's text. */
  readonly symbols: readonly string[];
  /**
   * Shortest completion from each state, in bytes (a code point edge costs its UTF-8 length, a
   * symbol 1, epsilon 0); Infinity where the final state cannot be reached (such states are
   * dropped from every DFA state). With a byte-level vocabulary (every byte is a token) it bounds
   * the tokens still needed, which is what keeps a constrained call inside its token budget.
   */
  readonly dist: Float64Array;
}

/** UTF-8 length of a code point. */
export const utf8Length = (cp: number): number => (cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4);

/** A code point's UTF-16 text. */
export const cpText = (cp: number): string => String.fromCodePoint(cp);

/** A guard against schemas whose automaton would not fit in memory (each state is a few small arrays). */
const DEFAULT_MAX_STATES = 400_000;

/**
 * Builds an Nfa with Thompson-style fragments: every emitter takes the state to start from and
 * returns the state it ends in, so sequences chain (`end = b.text(b.char(s, 0x7b), '"a": ')`).
 */
export class NfaBuilder {
  private readonly ranges: number[][] = [];
  private readonly syms: number[][] = [];
  private readonly eps: number[][] = [];
  private readonly symbolIds = new Map<string, number>();
  private readonly symbols: string[] = [];
  private readonly splitter: RegExp | null;

  /**
   * `addedTokens`: texts a tokenizer always emits as one token (its added tokens). Literal text
   * containing one is matched as that symbol; null: literal text is plain characters (an EBNF
   * export for an engine that matches text).
   */
  constructor(
    addedTokens: readonly string[] | null = null,
    private readonly maxStates = DEFAULT_MAX_STATES,
  ) {
    const list = (addedTokens ?? []).filter((t) => t.length > 0).sort((a, b) => b.length - a.length);
    this.splitter = list.length === 0 ? null : new RegExp(list.map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|'), 'g');
  }

  get size(): number {
    return this.ranges.length;
  }

  state(): number {
    if (this.ranges.length >= this.maxStates)
      throw new GrammarError('too-large', '#', `the automaton would exceed ${this.maxStates} states: simplify the schema`);
    this.ranges.push([]);
    this.syms.push([]);
    this.eps.push([]);
    return this.ranges.length - 1;
  }

  /** Edge on any code point in [lo, hi]. */
  range(from: number, lo: number, hi: number, to: number): void {
    this.ranges[from].push(lo, hi, to);
  }

  /** Edges on each [lo, hi] pair of `set` (flat list), all to `to`. */
  ranges2(from: number, set: readonly number[], to: number): void {
    for (let i = 0; i < set.length; i += 2) this.ranges[from].push(set[i], set[i + 1], to);
  }

  epsilon(from: number, to: number): void {
    this.eps[from].push(to);
  }

  /** One code point, from a new end state. */
  char(from: number, cp: number): number {
    const to = this.state();
    this.range(from, cp, cp, to);
    return to;
  }

  /** One code point in [lo, hi]. */
  charRange(from: number, lo: number, hi: number): number {
    const to = this.state();
    this.range(from, lo, hi, to);
    return to;
  }

  symbol(from: number, text: string): number {
    let id = this.symbolIds.get(text);
    if (id === undefined) {
      id = this.symbols.length;
      this.symbols.push(text);
      this.symbolIds.set(text, id);
    }
    const to = this.state();
    this.syms[from].push(id, to);
    return to;
  }

  /** Literal text: its characters, and its added tokens as symbols. */
  text(from: number, text: string): number {
    let at = from;
    const chars = (s: string) => {
      for (const ch of s) at = this.char(at, ch.codePointAt(0) as number);
    };
    if (this.splitter === null) {
      chars(text);
      return at;
    }
    let last = 0;
    for (const m of text.matchAll(this.splitter)) {
      const i = m.index ?? 0;
      chars(text.slice(last, i));
      at = this.symbol(at, m[0]);
      last = i + m[0].length;
    }
    chars(text.slice(last));
    return at;
  }

  /** Alternatives: each emitter starts from its own state (entered by epsilon), all end in one state. */
  alt(from: number, options: readonly ((start: number) => number)[]): number {
    const end = this.state();
    for (const emit of options) {
      const start = this.state();
      this.epsilon(from, start);
      this.epsilon(emit(start), end);
    }
    return end;
  }

  /** `emit` zero or more times. */
  star(from: number, emit: (start: number) => number): number {
    const loop = this.state();
    this.epsilon(from, loop);
    this.epsilon(emit(loop), loop);
    return loop;
  }

  /** `emit` or nothing. */
  optional(from: number, emit: (start: number) => number): number {
    const end = this.state();
    this.epsilon(from, end);
    this.epsilon(emit(from), end);
    return end;
  }

  build(start: number, final: number): Nfa {
    return { ranges: this.ranges, syms: this.syms, eps: this.eps, start, final, symbols: this.symbols, dist: distances(this, final) };
  }

  /** Edges into each state, for the backward shortest-path pass. */
  reverse(): { from: number[][]; cost: number[][] } {
    const from: number[][] = this.ranges.map(() => []);
    const cost: number[][] = this.ranges.map(() => []);
    for (let s = 0; s < this.ranges.length; s++) {
      const r = this.ranges[s];
      for (let i = 0; i < r.length; i += 3) {
        from[r[i + 2]].push(s);
        cost[r[i + 2]].push(utf8Length(r[i]));
      }
      const y = this.syms[s];
      for (let i = 0; i < y.length; i += 2) {
        from[y[i + 1]].push(s);
        cost[y[i + 1]].push(1);
      }
      for (const t of this.eps[s]) {
        from[t].push(s);
        cost[t].push(0);
      }
    }
    return { from, cost };
  }
}

/** Shortest completion lengths (bytes) to `final`: Dijkstra over the reversed edges, costs 0..4 (bucket queue). */
function distances(b: NfaBuilder, final: number): Float64Array {
  const { from, cost } = b.reverse();
  const dist = new Float64Array(b.size).fill(Infinity);
  dist[final] = 0;
  const buckets: number[][] = [[final]];
  for (let d = 0; d < buckets.length; d++) {
    const bucket = buckets[d];
    if (!bucket) continue;
    for (let k = 0; k < bucket.length; k++) {
      const s = bucket[k];
      if (dist[s] !== d) continue;
      const f = from[s];
      const c = cost[s];
      for (let i = 0; i < f.length; i++) {
        const nd = d + c[i];
        if (nd < dist[f[i]]) {
          dist[f[i]] = nd;
          (buckets[nd] ??= []).push(f[i]);
        }
      }
    }
  }
  return dist;
}
