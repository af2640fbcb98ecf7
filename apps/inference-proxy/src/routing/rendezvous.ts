import { createHash } from 'node:crypto';

/**
 * Rendezvous (highest-random-weight) hashing: every (key, member) pair gets a score and a key
 * belongs to the member with the highest one. When a member leaves, only its keys move
 * (each to its own next-best member); when one joins it takes ~1/n of the keys from the
 * others and nothing else moves. No ring, no virtual nodes, O(n) per lookup: fine for the
 * handful of replicas a proxy fronts.
 */
export function rendezvousScore(key: string, member: string): bigint {
  return createHash('sha256').update(key).update('\u0000').update(member).digest().readBigUInt64BE(0);
}

/** Members ordered by preference for `key` (best first). */
export function rendezvousRank<T>(key: string, members: readonly T[], idOf: (m: T) => string): T[] {
  return members
    .map((m) => ({ m, score: rendezvousScore(key, idOf(m)) }))
    .sort((a, b) => (a.score === b.score ? 0 : a.score > b.score ? -1 : 1))
    .map((x) => x.m);
}
