import type { DataSource, EntityManager } from 'typeorm';
import type { SessionState } from '@anvil/contracts';
import { GatewaySession } from '@anvil/persistence';

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
  constructor(private readonly ds: DataSource) {}

  private repo(manager?: EntityManager) {
    return (manager ?? this.ds.manager).getRepository(GatewaySession);
  }

  async create(s: NewSession): Promise<GatewaySession> {
    const row = this.repo().create({ ...s, status: 'open', policyVersionAtStart: null, callCount: 0, branchCount: 0, closedAt: null, closeReason: null });
    return this.repo().save(row);
  }

  find(id: string): Promise<GatewaySession | null> {
    return this.repo().findOneBy({ id });
  }

  /** Closes an open session (idempotent: a closed one keeps its first close time and reason). */
  async close(id: string, reason: 'closed' | 'expired'): Promise<GatewaySession | null> {
    await this.ds.query(`UPDATE "gateway_sessions" SET "status" = 'closed', "closed_at" = now(), "close_reason" = $2 WHERE "id" = $1 AND "status" = 'open'`, [id, reason]);
    return this.find(id);
  }

  /**
   * Reserves `count` turn indexes for calls about to be recorded (and counts `newBranches`),
   * only while the session is still open: null when it closed meanwhile, so a call of a closed
   * session is never recorded nor answered.
   */
  async reserveTurns(id: string, count: number, newBranches: number): Promise<{ firstTurn: number } | null> {
    const rows: { call_count: number }[] = await this.ds.query(
      `UPDATE "gateway_sessions" SET "call_count" = "call_count" + $2, "branch_count" = "branch_count" + $3
       WHERE "id" = $1 AND "status" = 'open' RETURNING "call_count"`,
      [id, count, newBranches],
    );
    const row = Array.isArray(rows[0]) ? (rows[0] as unknown as { call_count: number }[])[0] : rows[0];
    return row ? { firstTurn: Number(row.call_count) - count } : null;
  }
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
