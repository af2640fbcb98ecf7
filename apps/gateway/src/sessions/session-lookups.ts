import type { GatewaySession } from '@anvil/persistence';
import { CAPTURE_COLUMNS, type CaptureRow } from '../capture/capture-store';
import type { SqlClient } from '../db/sql-client';
import { SESSION_COLUMNS, toSession, type SessionRow } from './session-row';

export interface SessionLookup {
  session: GatewaySession;
  /** The deepest answered call of the session whose reply fingerprint was asked for (see CaptureStore). */
  match: CaptureRow | null;
}

interface Waiting {
  sessionId: string;
  fingerprints: readonly string[];
  resolve(r: SessionLookup | null): void;
  reject(err: unknown): void;
}

/**
 * The read every call starts with: its session row and the capture row it extends, fresh from
 * PostgreSQL (a close is seen by every instance at once). Lookups that arrive while earlier ones
 * are being answered are sent together, as one statement: a round trip to the database costs
 * both processes far more CPU than the rows do, so under load the cost per call falls, and
 * unloaded a lookup goes out at once.
 */
export class SessionLookups {
  private waiting: Waiting[] = [];
  private inFlight = 0;

  constructor(
    private readonly sql: SqlClient,
    private readonly opts: { maxInFlight?: number; maxBatch?: number } = {},
  ) {}

  find(sessionId: string, fingerprints: readonly string[]): Promise<SessionLookup | null> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ sessionId, fingerprints, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.waiting.length > 0 && this.inFlight < (this.opts.maxInFlight ?? 2)) {
      const batch = this.waiting.splice(0, this.opts.maxBatch ?? 128);
      this.inFlight++;
      void this.run(batch).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
  }

  private async run(batch: Waiting[]): Promise<void> {
    const fpOrd: number[] = [];
    const fps: string[] = [];
    const depth: number[] = [];
    batch.forEach((w, ord) =>
      w.fingerprints.forEach((fp, i) => {
        fpOrd.push(ord);
        fps.push(fp);
        depth.push(i);
      }),
    );
    let rows: (SessionRow & Record<string, unknown>)[];
    try {
      rows = await this.sql.query('gw_session_lookups', LOOKUP_SQL, [
        batch.map((_, i) => i),
        batch.map((w) => w.sessionId),
        fpOrd,
        fps,
        depth,
      ]);
    } catch (err) {
      for (const w of batch) w.reject(err);
      return;
    }
    const byOrd = new Map(rows.map((r) => [Number(r.q_ord), r]));
    batch.forEach((w, ord) => {
      const r = byOrd.get(ord);
      if (!r) return w.resolve(null);
      let match: CaptureRow | null = null;
      if (r.m_id !== null && r.m_id !== undefined) {
        const m: Record<string, unknown> = {};
        for (const [k, v] of Object.entries(r)) if (k.startsWith('m_')) m[k.slice(2)] = v;
        match = m as unknown as CaptureRow;
      }
      w.resolve({ session: toSession(r), match });
    });
  }
}

/**
 * q: the lookups (ord, session id); f: every lookup's prefix fingerprints with their depth.
 * m: per lookup, the deepest matching capture row of its session (latest among equals).
 */
const LOOKUP_SQL = `WITH "q" AS (
    SELECT * FROM unnest($1::int[], $2::varchar[]) AS q("ord", "sid")
  ), "f" AS (
    SELECT * FROM unnest($3::int[], $4::varchar[], $5::int[]) AS f("ord", "fp", "depth")
  ), "m" AS (
    SELECT DISTINCT ON (f."ord") f."ord" AS "m_ord", ${CAPTURE_COLUMNS.replace(/"(\w+)"/g, 'c."$1" AS "m_$1"')}
    FROM "f" JOIN "q" ON q."ord" = f."ord" JOIN "gateway_calls" c ON c."session_id" = q."sid" AND c."reply_fingerprint" = f."fp"
    ORDER BY f."ord", f."depth" DESC, c."created_at" DESC, c."turn_index" DESC
  )
  SELECT q."ord" AS "q_ord", ${SESSION_COLUMNS.replace(/"(\w+)"/g, 's."$1"')}, m.*
  FROM "q" JOIN "gateway_sessions" s ON s."id" = q."sid" LEFT JOIN "m" ON m."m_ord" = q."ord"`;
