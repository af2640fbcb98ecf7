import type { Nfa } from '../nfa/nfa';
import { ByteDfa, DEAD, UNKNOWN } from './byte-dfa';
import type { Vocabulary } from './vocabulary';

/** The state after a stop id was sampled at an accepting state. */
export const FINISHED = -3;

export interface AllowedTokens {
  /** Bit i of word i >> 5 set: id i may be sampled. Shared and cached: never modify it. */
  mask: Uint32Array;
  /** How many ids the mask allows (1: the token is forced). */
  count: number;
}

/**
 * A grammar compiled over one vocabulary with the stop ids that end it: for each automaton
 * state, which token ids keep it alive. The mask of a state is computed once, by walking the
 * vocabulary trie alongside the byte DFA (a subtree is skipped as soon as its prefix kills the
 * state), and cached, so a call spends the walk once per distinct state it passes through; the
 * stop ids are allowed exactly where the grammar is complete.
 *
 * Budget: given the tokens left, a state whose successors might not finish in time gets a
 * tighter mask: only tokens after which the shortest completion (in bytes, one token each at
 * worst) plus the stop id still fits. So a call whose budget covers the shortest completion
 * always ends well-formed, however the sampling goes.
 */
export class TokenAutomaton {
  readonly dfa: ByteDfa;
  private readonly full: (AllowedTokens | undefined)[] = [];
  /** Per state: the largest completion distance among the states its allowed tokens lead to. */
  private readonly maxNext: number[] = [];
  private readonly tight = new Map<string, AllowedTokens>();
  /** Per grammar symbol: the ids of that added token. */
  private readonly symbolIds: (readonly number[])[];
  private readonly stops: Uint32Array;
  private readonly stopSet: ReadonlySet<number>;
  private readonly stopsOnly: AllowedTokens;

  constructor(
    nfa: Nfa,
    readonly vocab: Vocabulary,
    stopIds: readonly number[],
  ) {
    if (stopIds.length === 0) throw new Error('a constrained generation needs stop ids to end on');
    this.dfa = new ByteDfa(nfa);
    this.symbolIds = nfa.symbols.map((s) => vocab.added.get(s) ?? []);
    this.stops = new Uint32Array(vocab.words);
    for (const id of stopIds) {
      if (!Number.isInteger(id) || id < 0 || id >= vocab.size) throw new Error(`stop id ${id} is outside the vocabulary`);
      this.stops[id >>> 5] |= 1 << (id & 31);
    }
    this.stopSet = new Set(stopIds);
    this.stopsOnly = { mask: this.stops, count: popcount(this.stops) };
  }

  get start(): number {
    return this.dfa.start;
  }

  /**
   * The ids that may follow `state`. With `remaining` (tokens the generation may still sample,
   * this one included), only those after which the grammar can still be completed and ended in
   * time, when some successor could not (see the class comment).
   */
  allowed(state: number, remaining?: number): AllowedTokens {
    if (state === FINISHED) return this.stopsOnly;
    let full = this.full[state];
    if (!full) {
      const walked = this.walk(state, Infinity);
      full = { mask: walked.mask, count: walked.count };
      this.full[state] = full;
      this.maxNext[state] = walked.maxNext;
    }
    if (remaining === undefined || this.maxNext[state] <= remaining - 2) return full;
    // this token and then a stop id: with one token left a complete grammar may only stop
    if (remaining < 2 && this.dfa.accepting(state)) return this.stopsOnly;
    const key = `${state}:${remaining}`;
    let t = this.tight.get(key);
    if (!t) {
      let walked = this.walk(state, remaining - 2);
      // the budget cannot cover any completion: make the most progress towards one
      if (walked.count === 0) walked = this.walk(state, this.minNext(state));
      t = { mask: walked.mask, count: walked.count };
      if (this.tight.size > 4096) this.tight.clear();
      this.tight.set(key, t);
    }
    return t;
  }

  /** The state after sampling `id` in `state`, DEAD when the grammar does not allow it. */
  next(state: number, id: number): number {
    if (state === FINISHED) return this.stopSet.has(id) ? FINISHED : DEAD;
    if (this.stopSet.has(id) && this.dfa.accepting(state)) return FINISHED;
    const bytes = this.vocab.bytesOf(id);
    if (bytes !== undefined) {
      let s = state;
      for (let i = 0; i < bytes.length && s !== DEAD; i++) s = this.dfa.next(s, bytes[i]);
      return s;
    }
    for (let k = 0; k < this.symbolIds.length; k++) if (this.symbolIds[k].includes(id)) return this.dfa.nextSymbol(state, k);
    return DEAD;
  }

  accepting(state: number): boolean {
    return state === FINISHED || this.dfa.accepting(state);
  }

  /** DFA states made so far (a measure of how much of the grammar a workload visits). */
  get states(): number {
    return this.dfa.size;
  }

  /** The smallest completion distance any allowed token leads to. */
  private minNext(state: number): number {
    let best = Infinity;
    this.visit(state, (t) => {
      best = Math.min(best, this.dfa.dist(t));
    });
    return best;
  }

  /**
   * Ids whose successor state finishes within `limit` bytes (Infinity: every live one), and the
   * stop ids where complete. The hot loop of constrained decoding: one iteration per trie node
   * the state lets through (the whole vocabulary inside a JSON string), so it reads the DFA's
   * flat tables directly and sets mask bits inline.
   */
  private walk(state: number, limit: number): { mask: Uint32Array; count: number; maxNext: number } {
    const dfa = this.dfa;
    const mask = new Uint32Array(this.vocab.words);
    let maxNext = 0;
    if (dfa.accepting(state)) for (let w = 0; w < mask.length; w++) mask[w] |= this.stops[w];
    if (dfa.atBoundary(state)) {
      for (const k of dfa.symbolsAfter(state)) {
        const t = dfa.nextSymbol(state, k);
        const d = t === DEAD ? Infinity : dfa.dist(t);
        if (d > limit) continue;
        for (const id of this.symbolIds[k]) mask[id >>> 5] |= 1 << (id & 31);
        if (this.symbolIds[k].length > 0 && d > maxNext) maxNext = d;
      }
    }
    const { childStart, edgeByte, edgeNode, tokStart, tokIds } = this.vocab;
    const { tables, dists } = dfa;
    let nodes = this.stackNodes;
    let states = this.stackStates;
    nodes[0] = 0;
    states[0] = state;
    let top = 1;
    while (top > 0) {
      top--;
      const n = nodes[top];
      const s = states[top];
      const table = tables[s];
      for (let e = childStart[n], end = childStart[n + 1]; e < end; e++) {
        let t = table[edgeByte[e]];
        if (t === UNKNOWN) t = dfa.next(s, edgeByte[e]);
        if (t === DEAD) continue;
        const m = edgeNode[e];
        const k1 = tokStart[m + 1];
        let k = tokStart[m];
        if (k1 > k) {
          const d = dists[t];
          if (d <= limit) {
            if (d > maxNext) maxNext = d;
            for (; k < k1; k++) {
              const id = tokIds[k];
              mask[id >>> 5] |= 1 << (id & 31);
            }
          }
        }
        if (childStart[m + 1] > childStart[m]) {
          if (top === nodes.length) {
            nodes = grow(nodes);
            states = grow(states);
            this.stackNodes = nodes;
            this.stackStates = states;
          }
          nodes[top] = m;
          states[top] = t;
          top++;
        }
      }
    }
    return { mask, count: popcount(mask), maxNext };
  }

  private stackNodes: Int32Array = new Int32Array(1024);
  private stackStates: Int32Array = new Int32Array(1024);

  /** Calls `found(nextState, ids, from, to)` for every group of ids (ids[from..to)) that keeps `state` alive. */
  private visit(state: number, found: (next: number, ids: ArrayLike<number>, from: number, to: number) => void): void {
    const dfa = this.dfa;
    if (dfa.atBoundary(state)) {
      for (const k of dfa.symbolsAfter(state)) {
        const t = dfa.nextSymbol(state, k);
        if (t !== DEAD && this.symbolIds[k].length > 0) found(t, this.symbolIds[k], 0, this.symbolIds[k].length);
      }
    }
    const { childStart, edgeByte, edgeNode, tokStart, tokIds } = this.vocab;
    // explicit stack of (trie node, DFA state)
    let nodes = new Int32Array(256);
    let states = new Int32Array(256);
    let top = 0;
    nodes[0] = 0;
    states[0] = state;
    top = 1;
    while (top > 0) {
      top--;
      const n = nodes[top];
      const s = states[top];
      for (let e = childStart[n], end = childStart[n + 1]; e < end; e++) {
        const t = dfa.next(s, edgeByte[e]);
        if (t === DEAD) continue;
        const m = edgeNode[e];
        if (tokStart[m + 1] > tokStart[m]) found(t, tokIds, tokStart[m], tokStart[m + 1]);
        if (childStart[m + 1] > childStart[m]) {
          if (top === nodes.length) {
            const grownNodes = new Int32Array(nodes.length * 2);
            grownNodes.set(nodes);
            nodes = grownNodes;
            const grownStates = new Int32Array(states.length * 2);
            grownStates.set(states);
            states = grownStates;
          }
          nodes[top] = m;
          states[top] = t;
          top++;
        }
      }
    }
  }
}

function grow(a: Int32Array): Int32Array {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}

export function popcount(mask: Uint32Array): number {
  let c = 0;
  for (let w = 0; w < mask.length; w++) {
    let v = mask[w];
    v = v - ((v >>> 1) & 0x55555555);
    v = (v & 0x33333333) + ((v >>> 2) & 0x33333333);
    c += (((v + (v >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
  }
  return c;
}
