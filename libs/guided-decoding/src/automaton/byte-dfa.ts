import type { Nfa } from '../nfa/nfa';

export const DEAD = -1;
/** A transition not computed yet (ByteDfa.tables holds it until next() fills it in). */
export const UNKNOWN = -2;

interface DfaState {
  /** NFA states (epsilon-closed; only those with edges or final, and only those that can still finish), sorted. */
  readonly set: Int32Array;
  /** UTF-8 bytes of a character begun but not finished (a token may end inside a character). */
  readonly pending: readonly number[];
  /** Next state per byte (UNKNOWN until first asked). */
  readonly bytes: Int32Array;
  /** Next state per grammar symbol (added token). */
  readonly symbols: Int32Array;
  readonly accepting: boolean;
  /** Shortest completion in bytes (see Nfa.dist). */
  readonly dist: number;
}

/**
 * The grammar's automaton over BYTES, determinised lazily (a state is made the first time a
 * transition reaches it, and transitions are cached): what a byte-level vocabulary walks. A DFA
 * state is a set of NFA states plus the bytes of an unfinished UTF-8 character, so a token that
 * ends in the middle of a character (byte-level BPE splits them) leaves the automaton between
 * bytes; a lead byte is accepted only when some character it can begin is allowed next, and only
 * well-formed UTF-8 is (no overlongs, surrogates or bytes past U+10FFFF).
 */
export class ByteDfa {
  private readonly states: DfaState[] = [];
  private readonly index = new Map<string, number>();
  /**
   * Per state its byte transitions (UNKNOWN until next() computes one) and its completion
   * distance, as flat arrays: the vocabulary walk reads them for every trie node, without a call.
   */
  readonly tables: Int32Array[] = [];
  readonly dists: number[] = [];
  readonly start: number;

  constructor(readonly nfa: Nfa) {
    this.start = this.intern(this.closure([nfa.start]), []);
  }

  get size(): number {
    return this.states.length;
  }

  accepting(s: number): boolean {
    return this.states[s].accepting;
  }

  /** Whether the state is between characters (symbols may follow only there). */
  atBoundary(s: number): boolean {
    return this.states[s].pending.length === 0;
  }

  dist(s: number): number {
    return this.states[s].dist;
  }

  /** The state after `byte`, or DEAD. */
  next(s: number, byte: number): number {
    const st = this.states[s];
    let t = st.bytes[byte];
    if (t === UNKNOWN) {
      t = this.computeNext(st, byte);
      st.bytes[byte] = t;
    }
    return t;
  }

  /** The state after the grammar symbol `sym` (an added token), or DEAD. */
  nextSymbol(s: number, sym: number): number {
    const st = this.states[s];
    let t = st.symbols[sym];
    if (t === UNKNOWN) {
      t = DEAD;
      if (st.pending.length === 0) {
        const targets: number[] = [];
        for (const u of st.set) {
          const y = this.nfa.syms[u];
          for (let i = 0; i < y.length; i += 2) if (y[i] === sym) targets.push(y[i + 1]);
        }
        if (targets.length > 0) t = this.intern(this.closure(targets), []);
      }
      st.symbols[sym] = t;
    }
    return t;
  }

  /** Grammar symbols that may follow state s. */
  symbolsAfter(s: number): number[] {
    const st = this.states[s];
    if (st.pending.length > 0) return [];
    const out = new Set<number>();
    for (const u of st.set) {
      const y = this.nfa.syms[u];
      for (let i = 0; i < y.length; i += 2) out.add(y[i]);
    }
    return [...out];
  }

  private computeNext(st: DfaState, byte: number): number {
    const pending = st.pending;
    if (pending.length === 0) {
      if (byte < 0x80) return this.afterCodePoint(st.set, byte);
      const need = sequenceLength(byte);
      if (need === 0) return DEAD;
      return this.partial(st.set, [byte], need);
    }
    const need = sequenceLength(pending[0]);
    const [lo, hi] = pending.length === 1 ? secondByteRange(pending[0]) : [0x80, 0xbf];
    if (byte < lo || byte > hi) return DEAD;
    const bytes = [...pending, byte];
    if (bytes.length < need) return this.partial(st.set, bytes, need);
    return this.afterCodePoint(st.set, decode(bytes));
  }

  /** A state holding an unfinished character, if some character it can still become is allowed. */
  private partial(set: Int32Array, bytes: number[], need: number): number {
    const [clo, chi] = possibleCodePoints(bytes, need);
    return this.overlaps(set, clo, chi) ? this.intern(set, bytes) : DEAD;
  }

  private overlaps(set: Int32Array, lo: number, hi: number): boolean {
    for (const u of set) {
      const r = this.nfa.ranges[u];
      for (let i = 0; i < r.length; i += 3) if (r[i] <= hi && r[i + 1] >= lo) return true;
    }
    return false;
  }

  private afterCodePoint(set: Int32Array, cp: number): number {
    const targets: number[] = [];
    for (const u of set) {
      const r = this.nfa.ranges[u];
      for (let i = 0; i < r.length; i += 3) if (r[i] <= cp && cp <= r[i + 1]) targets.push(r[i + 2]);
    }
    if (targets.length === 0) return DEAD;
    const closed = this.closure(targets);
    return closed.length === 0 ? DEAD : this.intern(closed, []);
  }

  /** Epsilon closure, keeping the states that have edges (or are final) and can still reach the final state. */
  private closure(from: number[]): Int32Array {
    const { eps, ranges, syms, final, dist } = this.nfa;
    const seen = new Set<number>();
    const stack = [...from];
    const kept: number[] = [];
    while (stack.length > 0) {
      const u = stack.pop() as number;
      if (seen.has(u)) continue;
      seen.add(u);
      if (!Number.isFinite(dist[u])) continue;
      if (ranges[u].length > 0 || syms[u].length > 0 || u === final) kept.push(u);
      for (const v of eps[u]) if (!seen.has(v)) stack.push(v);
    }
    return Int32Array.from(kept).sort();
  }

  private intern(set: Int32Array, pending: number[]): number {
    const key = `${set.join(',')}|${pending.join('.')}`;
    const known = this.index.get(key);
    if (known !== undefined) return known;
    const { nfa } = this;
    let dist = Infinity;
    if (pending.length === 0) {
      for (const u of set) dist = Math.min(dist, nfa.dist[u]);
    } else {
      // finish the character (its remaining bytes), then the cheapest edge it can take
      const need = sequenceLength(pending[0]);
      const [clo, chi] = possibleCodePoints(pending, need);
      for (const u of set) {
        const r = nfa.ranges[u];
        for (let i = 0; i < r.length; i += 3) if (r[i] <= chi && r[i + 1] >= clo) dist = Math.min(dist, nfa.dist[r[i + 2]]);
      }
      dist += need - pending.length;
    }
    const id = this.states.length;
    const bytes = new Int32Array(256).fill(UNKNOWN);
    this.states.push({
      set,
      pending,
      bytes,
      symbols: new Int32Array(nfa.symbols.length).fill(UNKNOWN),
      accepting: pending.length === 0 && set.includes(nfa.final),
      dist,
    });
    this.tables.push(bytes);
    this.dists.push(dist);
    this.index.set(key, id);
    return id;
  }
}

/** Bytes in the UTF-8 sequence a lead byte starts (0: not a lead byte). */
function sequenceLength(lead: number): number {
  if (lead >= 0xc2 && lead <= 0xdf) return 2;
  if (lead >= 0xe0 && lead <= 0xef) return 3;
  if (lead >= 0xf0 && lead <= 0xf4) return 4;
  return 0;
}

/** Allowed second bytes after a lead byte (the rules that exclude overlongs, surrogates and > U+10FFFF). */
function secondByteRange(lead: number): [number, number] {
  if (lead === 0xe0) return [0xa0, 0xbf];
  if (lead === 0xed) return [0x80, 0x9f];
  if (lead === 0xf0) return [0x90, 0xbf];
  if (lead === 0xf4) return [0x80, 0x8f];
  return [0x80, 0xbf];
}

function decode(bytes: readonly number[]): number {
  const n = bytes.length;
  let cp = bytes[0] & (n === 2 ? 0x1f : n === 3 ? 0x0f : 0x07);
  for (let i = 1; i < n; i++) cp = (cp << 6) | (bytes[i] & 0x3f);
  return cp;
}

/** The code points a character that starts with `bytes` (of `need`) can be. */
function possibleCodePoints(bytes: readonly number[], need: number): [number, number] {
  const lo = [...bytes];
  const hi = [...bytes];
  for (let i = bytes.length; i < need; i++) {
    const [a, z] = i === 1 ? secondByteRange(bytes[0]) : [0x80, 0xbf];
    lo.push(a);
    hi.push(z);
  }
  return [decode(lo), decode(hi)];
}
