import { versionBoundAdmits } from '@anvil/rl';
import type { DataSource } from 'typeorm';
import { GatewayError } from '../errors';
import type { PolicyVersionStore } from './policy-version-store';

/** Advisory lock key serialising first-call admissions across gateway instances ('gwadm'). */
const ADMISSION_LOCK_KEY = '444036161901';

export type Admission =
  { admitted: true; startVersion: number; alreadyAdmitted: boolean } | { admitted: false; current: number; oldest: number };

/**
 * AReaL-style capacity gating (DESIGN.md, "Staleness"): current policy version − the oldest
 * in-flight session's start version ≤ η (MAX_STALENESS).
 *
 * - A session's start version is the current version when its FIRST call is admitted (stored
 *   on the row). In-flight = open, unexpired sessions that have been admitted.
 * - A first call is admitted only while admitting it keeps the bound: it would start at the
 *   current version, so that holds exactly when no in-flight session started before
 *   current − η. Once the trainer has moved on by more than η, new sessions wait (429 +
 *   Retry-After) until the stale ones finish (are closed or expire); they do not add more
 *   off-policy samples meanwhile.
 * - Later calls of an admitted session are never refused for staleness: cutting a running
 *   trajectory would waste it, and its later tokens carry newer versions anyway.
 * The check and the write run in one transaction under an advisory lock, so two instances
 * cannot both admit against the same snapshot.
 */
export class StalenessGate {
  constructor(
    private readonly ds: DataSource,
    private readonly versions: PolicyVersionStore,
    private readonly maxStaleness: number,
  ) {}

  async admit(sessionId: string): Promise<Admission> {
    return this.ds.transaction(async (m) => {
      await m.query('SELECT pg_advisory_xact_lock($1)', [ADMISSION_LOCK_KEY]);
      // One statement reads the current version, the session's own start and the oldest in-flight
      // start (on PGlite every statement is a round trip to its thread, and this ran once per
      // rollout as four); the bound itself stays libs/rl's.
      const rows: { own: number | null; oldest: number | null; current: number | null }[] = await m.query(
        `SELECT (SELECT max("version") FROM "gateway_policy_state") AS "current",
                (SELECT "policy_version_at_start" FROM "gateway_sessions" WHERE "id" = $1) AS "own",
                (SELECT min("policy_version_at_start") FROM "gateway_sessions"
                  WHERE "status" = 'open' AND "policy_version_at_start" IS NOT NULL AND ("expires_at" IS NULL OR "expires_at" > now())) AS "oldest"`,
        [sessionId],
      );
      const r = rows[0];
      if (r.own !== null && r.own !== undefined) return { admitted: true, startVersion: Number(r.own), alreadyAdmitted: true };
      const current = this.versions.versionOf(r.current);
      const oldest = r.oldest === null || r.oldest === undefined ? current : Math.min(Number(r.oldest), current);
      if (!versionBoundAdmits(current, oldest, this.maxStaleness)) return { admitted: false, current, oldest };
      await m.query(`UPDATE "gateway_sessions" SET "policy_version_at_start" = $2 WHERE "id" = $1 AND "policy_version_at_start" IS NULL`, [
        sessionId,
        current,
      ]);
      return { admitted: true, startVersion: current, alreadyAdmitted: false };
    });
  }

  /** The 429 a refused first call gets (OpenAI's rate-limit shape, with Retry-After). */
  static refusal(a: { current: number; oldest: number }, maxStaleness: number, retryAfterS: number): GatewayError {
    return new GatewayError(
      'over_capacity',
      `over staleness capacity: policy version ${a.current} is ${a.current - a.oldest} ahead of the oldest in-flight session (max ${maxStaleness}); retry after ${retryAfterS} s`,
      'staleness_capacity',
      null,
      retryAfterS,
    );
  }
}
