import type { DataSource, EntityManager } from 'typeorm';
import type { SessionState } from '@anvil/contracts';
import { GatewaySession } from '@anvil/persistence';
import { CAPTURE_COLUMNS, matchSql, type CaptureRow } from '../capture/capture-store';
import type { SqlClient } from '../db/sql-client';

export interface NewSession {
  id: string;
  keyHash: string;
  rolloutId: string;
  groupId: string;
  taskId: string;
  model: string;
  maxContextTokens: number | null;
  expiresAt: Date | null;
}

/**
 * Session rows in PostgreSQL. Every check a call depends on (status, expiry, admission, turn
 * numbering) reads or writes the row, never an in-process copy, so gateway instances behind a
 * load balancer agree.
 */
export class SessionStore {
  constructor(
    private readonly ds: DataSource,
    private readonly sql: SqlClient,
  ) {}

  private repo(manager?: EntityManager) {
    return (manager ?? this.ds.manager).getRepository(GatewaySession);
  }

  async create(s: NewSession): Promise<GatewaySession> {
    const row = this.repo().create({ ...s, status: 'open', policyVersionAtStart: null, callCount: 0, branchCount: 0, closedAt: null, closeReason: null });
    return this.repo().save(row);
  }

  /** The session row (every call reads it: a named statement, no entity hydration). */
  async find(id: string): Promise<GatewaySession | null> {
    const [r] = await this.sql.query<SessionRow>('gw_session_by_id', SESSION_SQL, [id]);
    return r ? toSession(r) : null;
  }

  /**
   * The session row and, in the same round trip, the capture row a request extends: the
   * deepest call whose reply fingerprint is among `fingerprints` (see CaptureStore). A call
   * needs both, and each round trip to PostgreSQL costs more than the query itself.
   */
  async findWithMatch(id: string, fingerprints: readonly string[]): Promise<{ session: GatewaySession; match: CaptureRow | null } | null> {
    if (fingerprints.length === 0) {
      const session = await this.find(id);
      return session ? { session, match: null } : null;
    }
    const [r] = await this.sql.query<SessionRow & Record<string, unknown>>('gw_session_with_match', SESSION_WITH_MATCH_SQL, [id, fingerprints]);
    if (!r) return null;
    let match: CaptureRow | null = null;
    if (r.m_id !== null && r.m_id !== undefined) {
      const m: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(r)) if (k.startsWith('m_')) m[k.slice(2)] = v;
      match = m as unknown as CaptureRow;
    }
    return { session: toSession(r), match };
  }

  /** Closes an open session (idempotent: a closed one keeps its first close time and reason). */
  async close(id: string, reason: 'closed' | 'expired'): Promise<GatewaySession | null> {
    await this.ds.query(`UPDATE "gateway_sessions" SET "status" = 'closed', "closed_at" = now(), "close_reason" = $2 WHERE "id" = $1 AND "status" = 'open'`, [id, reason]);
    return this.find(id);
  }
}

interface SessionRow {
  id: string;
  key_hash: string;
  rollout_id: string;
  group_id: string;
  task_id: string;
  model: string;
  max_context_tokens: number | null;
  status: string;
  expires_at: Date | null;
  policy_version_at_start: number | null;
  call_count: number;
  branch_count: number;
  created_at: Date;
  closed_at: Date | null;
  close_reason: string | null;
}

const SESSION_SQL = `SELECT "id", "key_hash", "rollout_id", "group_id", "task_id", "model", "max_context_tokens", "status", "expires_at",
  "policy_version_at_start", "call_count", "branch_count", "created_at", "closed_at", "close_reason" FROM "gateway_sessions" WHERE "id" = $1`;

const SESSION_WITH_MATCH_SQL = `SELECT s.*, ${CAPTURE_COLUMNS.replace(/"(\w+)"/g, 'm."$1" AS "m_$1"')}
  FROM (${SESSION_SQL}) s LEFT JOIN LATERAL (${matchSql('s."id"', '$2')}) m ON true`;

function toSession(r: SessionRow): GatewaySession {
  return Object.assign(new GatewaySession(), {
    id: r.id,
    keyHash: r.key_hash,
    rolloutId: r.rollout_id,
    groupId: r.group_id,
    taskId: r.task_id,
    model: r.model,
    maxContextTokens: r.max_context_tokens,
    status: r.status as GatewaySession['status'],
    expiresAt: r.expires_at,
    policyVersionAtStart: r.policy_version_at_start,
    callCount: r.call_count,
    branchCount: r.branch_count,
    createdAt: r.created_at,
    closedAt: r.closed_at,
    closeReason: r.close_reason,
  });
}

export function sessionState(s: GatewaySession): SessionState {
  return {
    sessionId: s.id,
    status: s.status,
    rolloutId: s.rolloutId,
    groupId: s.groupId,
    taskId: s.taskId,
    model: s.model,
    callCount: s.callCount,
    branchCount: s.branchCount,
    policyVersionAtStart: s.policyVersionAtStart,
    createdAt: s.createdAt.getTime(),
    expiresAt: s.expiresAt ? s.expiresAt.getTime() : null,
    closedAt: s.closedAt ? s.closedAt.getTime() : null,
    closeReason: s.closeReason,
  };
}
