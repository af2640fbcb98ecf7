import { ByteDfa, DEAD } from '../automaton/byte-dfa';
import type { TokenSource } from '../automaton/vocabulary';
import { compileGrammar, type GrammarNode } from '../grammar';
import type { GrammarConstraint } from '../constraint';

/** Whether `text` is a complete output of `grammar` (matched byte by byte, literal text as characters). */
export function accepts(grammar: GrammarNode, text: string): boolean {
  const dfa = new ByteDfa(compileGrammar(grammar));
  let s = dfa.start;
  for (const byte of new TextEncoder().encode(text)) {
    s = dfa.next(s, byte);
    if (s === DEAD) return false;
  }
  return dfa.accepting(s);
}

/** A seeded PRNG (mulberry32) for reproducible random walks. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Ids whose bit is set in `mask`. */
export function maskIds(mask: Uint32Array): number[] {
  const out: number[] = [];
  for (let w = 0; w < mask.length; w++) for (let b = 0; b < 32; b++) if (mask[w] & (1 << b)) out.push(w * 32 + b);
  return out;
}

/**
 * A byte-level vocabulary shaped like a real BPE one: every byte, then multi-byte pieces that
 * span JSON punctuation (`{"`, `": `, `", "`), words, digits, a piece holding a whole `"name"`,
 * pieces that end or begin inside a UTF-8 character (the two halves of "é", three pieces of an
 * emoji), and added tokens (the tool-call markers and an end of turn).
 */
export function bpeLikeVocabulary(): TokenSource & { decode(ids: readonly number[]): string; ids: Map<string, number> } {
  const enc = new TextEncoder();
  const pieces: Uint8Array[] = Array.from({ length: 256 }, (_, b) => Uint8Array.of(b));
  const text = [
    '{"',
    '"}',
    '": ',
    '", "',
    ', "',
    '}}',
    '{}',
    '[]',
    '[',
    '], ',
    'true',
    'false',
    'null',
    ' true',
    'tr',
    'ue',
    '12',
    '123',
    '0.',
    '.5',
    '-1',
    'e+',
    'city',
    'name',
    'arguments',
    '"name": "',
    '", "arguments": ',
    'add',
    'mul',
    'Paris',
    ' the',
    'hello',
    'a": 1',
    '"a',
    'b"',
    '\\n',
    '\\"',
    '\\u00',
    'é',
    'caf',
    'café',
    '"}\n',
    '}\n',
    'ok"',
    'yz',
  ];
  for (const t of text) pieces.push(enc.encode(t));
  pieces.push(Uint8Array.of(0x22, 0xc3)); // '"' + first byte of é
  pieces.push(Uint8Array.of(0xa9, 0x22)); // second byte of é + '"'
  pieces.push(Uint8Array.of(0xf0, 0x9f)); // 🎉 = F0 9F 8E 89
  pieces.push(Uint8Array.of(0x8e));
  pieces.push(Uint8Array.of(0x89, 0x22));
  const added = ['<tool_call>', '</tool_call>', '<|im_end|>', '<|endoftext|>'];
  const addedTokens = new Map<string, number>();
  added.forEach((a, i) => addedTokens.set(a, pieces.length + i));
  const ids = new Map<string, number>();
  pieces.forEach((p, i) => ids.set(new TextDecoder('latin1').decode(p), i));
  for (const [a, id] of addedTokens) ids.set(a, id);
  const vocabSize = pieces.length + added.length;
  const bytesOf = (id: number) => (id < pieces.length ? pieces[id] : id < vocabSize ? enc.encode(added[id - pieces.length]) : undefined);
  return {
    vocabSize,
    addedTokens,
    ids,
    tokenBytes: bytesOf,
    decode(list) {
      const parts = list.map((id) => bytesOf(id) ?? new Uint8Array(0));
      const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
      let at = 0;
      for (const p of parts) {
        all.set(p, at);
        at += p.length;
      }
      return new TextDecoder().decode(all);
    },
  };
}

/**
 * Samples a whole constrained generation: each step draws uniformly among the allowed ids
 * (a model that has no preference: the hardest case for termination, which the budget handles)
 * and stops at a stop id or after `maxTokens`. Returns the ids, the mask sizes and whether it stopped.
 */
export function randomWalk(
  constraint: GrammarConstraint,
  stopIds: readonly number[],
  maxTokens: number,
  random: () => number,
): { ids: number[]; counts: number[]; stopped: boolean } {
  const ids: number[] = [];
  const counts: number[] = [];
  for (let i = 0; i < maxTokens; i++) {
    const allowed = maskIds(constraint.allowed(maxTokens - i));
    counts.push(allowed.length);
    const id = allowed[Math.floor(random() * allowed.length)];
    constraint.advance(id);
    ids.push(id);
    if (stopIds.includes(id)) return { ids, counts, stopped: true };
  }
  return { ids, counts, stopped: false };
}
