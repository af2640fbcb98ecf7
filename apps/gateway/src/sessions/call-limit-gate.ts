import type { GatewaySession } from '@anvil/persistence';
import type { Logger } from '@anvil/observability';
import type { SqlClient } from '../db/sql-client';
import { GatewayError } from '../errors';
import { budgetSpentError, hasCallLimits, rateLimitedError, refillWaitMs, type LimitDecision } from './call-limits';

/** Why a call was refused, as the metrics label it. */
export type RefusalReason = 'budget' | 'rate';

/** An admitted request: `release()` gives its calls back to the budget when they end unanswered (it never throws). */
export interface AdmittedCalls {
  release(): Promise<void>;
}

interface Waiting {
  sessionId: string;
  n: number;
  resolve(d: LimitDecision | 'closed'): void;
  reject(err: unknown): void;
}

interface DecisionRow {
  ord: number;
  open: boolean;
  budget_ok: boolean;
  rate_ok: boolean;
  tokens: number | null;
  max_calls: number | null;
  calls_admitted: number;
  calls_per_second: number | null;
  call_burst: number | null;
}

const NOTHING_TO_RELEASE: AdmittedCalls = { release: async () => undefined };

/**
 * A session's call budget and rate limit, enforced where calls are admitted (after the
 * staleness gate, before generation). The counts live on the session's row and change in one
 * statement per admission, under the row's lock and on the database's clock, so any number of
 * gateway instances share them exactly. Refused calls are counted on the row (the rollout
 * manager reads them) and in the metrics, and go nowhere else: nothing is generated or recorded.
 *
 * Admissions that arrive while earlier ones are being decided go together as one statement (as
 * session lookups do), at most one per session: a statement updates a row once.
 */
export class CallLimitGate {
  private waiting: Waiting[] = [];
  private inFlight = 0;

  constructor(
    private readonly sql: SqlClient,
    private readonly d: { onRefused(reason: RefusalReason): void; logger: Logger },
    private readonly opts: { maxInFlight?: number; maxBatch?: number } = {},
  ) {}

  /** Admits `n` calls of `session` or throws its 429 (a request larger than the whole burst is a 400: it could never be admitted). */
  async admit(session: GatewaySession, n: number): Promise<AdmittedCalls> {
    if (!hasCallLimits(session)) return NOTHING_TO_RELEASE;
    if (session.callBurst !== null && n > session.callBurst)
      throw GatewayError.invalid(`n is ${n}, more calls than this session's rate limit lets through at once (${session.callBurst})`, 'n');
    const decision = await this.decide(session.id, n);
    // Closed since it was authenticated: answered as any call to a closed session, and not counted
    // (the counts the rollout manager read at the close are final).
    if (decision === 'closed') throw new GatewayError('gone', 'this session is closed', 'session_closed');
    if (decision.admitted) return session.maxCalls === null ? NOTHING_TO_RELEASE : { release: () => this.release(session.id, n) };
    this.d.onRefused(decision.reason);
    throw decision.reason === 'budget' ? budgetSpentError(decision) : rateLimitedError(decision);
  }

  private decide(sessionId: string, n: number): Promise<LimitDecision | 'closed'> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ sessionId, n, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.waiting.length > 0 && this.inFlight < (this.opts.maxInFlight ?? 2)) {
      const batch: Waiting[] = [];
      const later: Waiting[] = [];
      const sessions = new Set<string>();
      for (const w of this.waiting) {
        if (batch.length < (this.opts.maxBatch ?? 128) && !sessions.has(w.sessionId)) {
          sessions.add(w.sessionId);
          batch.push(w);
        } else later.push(w);
      }
      this.waiting = later;
      this.inFlight++;
      void this.run(batch).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
  }

  private async run(batch: Waiting[]): Promise<void> {
    let rows: DecisionRow[];
    try {
      rows = await this.sql.query<DecisionRow>('gw_call_limits', ADMIT_SQL, [
        batch.map((_, i) => i),
        batch.map((w) => w.sessionId),
        batch.map((w) => w.n),
      ]);
    } catch (err) {
      for (const w of batch) w.reject(err);
      return;
    }
    const byOrd = new Map(rows.map((r) => [Number(r.ord), r]));
    batch.forEach((w, ord) => {
      const r = byOrd.get(ord);
      // Authenticated a moment ago: a row that is gone now has nothing left to admit against.
      if (!r) return w.reject(GatewayError.sessionNotFound());
      w.resolve(r.open ? decisionOf(r, w.n) : 'closed');
    });
  }

  /** The calls of an admitted request that ended unanswered (failed, refused for staleness, the agent gone) leave the budget. */
  private async release(sessionId: string, n: number): Promise<void> {
    try {
      await this.sql.query(
        'gw_call_limits_release',
        `UPDATE "gateway_sessions" SET "calls_admitted" = GREATEST(0, "calls_admitted" - $2) WHERE "id" = $1`,
        [sessionId, n],
      );
    } catch (err) {
      // The budget then counts these calls as if answered: stricter than it should be, never looser.
      this.d.logger.warn('giving unanswered calls back to the budget failed', { sessionId, n, err });
    }
  }
}

function decisionOf(r: DecisionRow, n: number): LimitDecision {
  if (r.budget_ok && r.rate_ok) return { admitted: true };
  if (!r.budget_ok) return { admitted: false, reason: 'budget', maxCalls: Number(r.max_calls), callsAdmitted: Number(r.calls_admitted), n };
  const perSecond = Number(r.calls_per_second);
  return {
    admitted: false,
    reason: 'rate',
    waitMs: refillWaitMs(Number(r.tokens), n, perSecond),
    callsPerSecond: perSecond,
    callBurst: Number(r.call_burst),
  };
}

/**
 * q: the requests (ord, session, calls). cur: each session's row, locked (FOR UPDATE: a row that a
 * concurrent admission changed is read as it committed), with its bucket refilled to now() (the
 * database's clock, the same for every instance): tokens as of rate_at plus the rate times the time
 * since, at most the burst (a bucket never used is full). d: the decision; the budget is judged
 * first (a spent budget is final, a rate refusal is not). u: the row written in the same
 * statement: admitted calls and tokens taken when admitted, the refusal counted when not; a
 * session closed meanwhile is left as it was closed.
 */
const ADMIT_SQL = `WITH "q" AS (
    SELECT * FROM unnest($1::int[], $2::varchar[], $3::int[]) AS q("ord", "sid", "n")
  ), "cur" AS (
    SELECT q."ord", q."n", s."id", s."status" = 'open' AS "open", s."max_calls", s."calls_admitted", s."calls_per_second", s."call_burst",
      CASE WHEN s."calls_per_second" IS NULL THEN NULL ELSE LEAST(s."call_burst"::float8, COALESCE(s."rate_tokens", s."call_burst"::float8)
        + s."calls_per_second" * GREATEST(0, EXTRACT(EPOCH FROM now() - COALESCE(s."rate_at", now()))::float8)) END AS "tokens"
    FROM "q" JOIN "gateway_sessions" s ON s."id" = q."sid"
    FOR UPDATE OF s
  ), "d" AS (
    SELECT "cur".*, ("max_calls" IS NULL OR "calls_admitted" + "n" <= "max_calls") AS "budget_ok",
      ("tokens" IS NULL OR "tokens" >= "n") AS "rate_ok"
    FROM "cur"
  ), "u" AS (
    UPDATE "gateway_sessions" s SET
      "calls_admitted" = d."calls_admitted" + CASE WHEN d."budget_ok" AND d."rate_ok" THEN d."n" ELSE 0 END,
      "rate_tokens" = d."tokens" - CASE WHEN d."budget_ok" AND d."rate_ok" THEN d."n" ELSE 0 END,
      "rate_at" = CASE WHEN d."tokens" IS NULL THEN NULL ELSE now() END,
      "refused_budget" = s."refused_budget" + CASE WHEN d."budget_ok" THEN 0 ELSE 1 END,
      "refused_rate" = s."refused_rate" + CASE WHEN d."budget_ok" AND NOT d."rate_ok" THEN 1 ELSE 0 END
    FROM "d" WHERE s."id" = d."id" AND d."open"
  )
  SELECT "ord", "open", "budget_ok", "rate_ok", "tokens", "max_calls", "calls_admitted", "calls_per_second", "call_burst" FROM "d"`;
