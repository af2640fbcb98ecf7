import type { Replica } from './replica';
import { rendezvousRank } from './rendezvous';

export interface RouterOptions {
  /** Above this many in-flight generations the affine replica is bypassed (least-loaded instead). */
  maxInFlightPerReplica: number;
}

export class NoReplicaAvailableError extends Error {
  override readonly name = 'NoReplicaAvailableError';
}

export interface RouteDecision {
  replica: Replica;
  /** 'affinity': the session's own replica; 'least-loaded': it was unroutable, busy or excluded. */
  reason: 'affinity' | 'least-loaded';
}

/**
 * Session affinity for KV-cache reuse: a session's calls go to the replica rendezvous
 * hashing gives it among ALL members, so its prefix stays warm there and only sessions of a
 * replica that leaves the membership move. When that replica is unhealthy, holds stale
 * weights, is excluded for this request (it failed it) or has maxInFlightPerReplica running,
 * the least-loaded routable replica takes the call (ties go to the session's next-ranked
 * replica, so a session falls back to the same one while loads are even).
 */
export class Router {
  constructor(
    private readonly replicas: () => readonly Replica[],
    private readonly options: RouterOptions,
  ) {}

  route(sessionId: string, exclude: ReadonlySet<string> = new Set()): RouteDecision {
    const ranked = rendezvousRank(sessionId, this.replicas(), (r) => r.id);
    const candidates = ranked.filter((r) => r.routable && !exclude.has(r.id));
    if (candidates.length === 0) {
      throw new NoReplicaAvailableError(
        `no routable replica (${ranked.length} configured, ${ranked.filter((r) => r.routable).length} routable, ${exclude.size} excluded for this request)`,
      );
    }
    const affine = ranked[0];
    if (affine === candidates[0] && affine.inFlight < this.options.maxInFlightPerReplica) return { replica: affine, reason: 'affinity' };
    let best = candidates[0];
    for (const r of candidates) if (r.inFlight < best.inFlight) best = r;
    return { replica: best, reason: 'least-loaded' };
  }
}
