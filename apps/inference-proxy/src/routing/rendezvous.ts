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

/**
 * Scores of recent (key, member) pairs. A session makes many calls and each one ranks every
 * replica; a SHA-256 per replica per call is a visible share of the proxy's CPU. Bounded by
 * forgetting everything when full (the scores are cheap to recompute, and exact either way).
 */
const SCORE_CACHE_LIMIT = 50_000;
const scoreCache = new Map<string, bigint>();

function cachedScore(key: string, member: string): bigint {
  // The very bytes the score hashes, so two pairs that share a cache key share the score too.
  const cacheKey = `${key}\u0000${member}`;
  let score = scoreCache.get(cacheKey);
  if (score === undefined) {
    score = rendezvousScore(key, member);
    if (scoreCache.size >= SCORE_CACHE_LIMIT) scoreCache.clear();
    scoreCache.set(cacheKey, score);
  }
  return score;
}

/** Members ordered by preference for `key` (best first). */
export function rendezvousRank<T>(key: string, members: readonly T[], idOf: (m: T) => string): T[] {
  // One member (or none) ranks the same whatever the scores: no hashing.
  if (members.length <= 1) return members.slice();
  return members
    .map((m) => ({ m, score: cachedScore(key, idOf(m)) }))
    .sort((a, b) => (a.score === b.score ? 0 : a.score > b.score ? -1 : 1))
    .map((x) => x.m);
}
