import type { DataSource, EntityManager } from 'typeorm';
import type { BudgetSpentResponse, SessionCalls, SessionState } from '@anvil/contracts';
import { GatewaySession } from '@anvil/persistence';
import type { SqlClient } from '../db/sql-client';
import { SESSION_COLUMNS, SESSION_SQL, toSession, type SessionRow } from './session-row';

export interface NewSession {
  id: string;
  keyHash: string;
  rolloutId: string;
  groupId: string;
  taskId: string;
  model: string;
  maxContextTokens: number | null;
  expiresAt: Date | null;
  weightSwap: 'finish' | 'abort-and-resume' | null;
  /** The call limits (null: none); see call-limits.ts. */
  maxCalls: number | null;
  callsPerSecond: number | null;
  callBurst: number | null;
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
    const row = this.repo().create({
      ...s,
      status: 'open',
      policyVersionAtStart: null,
      callCount: 0,
      branchCount: 0,
      closedAt: null,
      closeReason: null,
      callsAdmitted: 0,
      rateTokens: null,
      rateAt: null,
      refusedBudget: 0,
      refusedRate: 0,
    });
    return this.repo().save(row);
  }

  /** Many sessions in one statement (the admin batch route): all are written or none. */
  async createMany(all: readonly NewSession[]): Promise<void> {
    await this.sql.query(
      'gw_sessions_create_many',
      `INSERT INTO "gateway_sessions" ("id", "key_hash", "rollout_id", "group_id", "task_id", "model", "max_context_tokens", "status", "expires_at", "weight_swap",
         "max_calls", "calls_per_second", "call_burst")
       SELECT "id", "key_hash", "rollout_id", "group_id", "task_id", "model", "max_context_tokens", 'open', "expires_at", "weight_swap",
         "max_calls", "calls_per_second", "call_burst"
       FROM unnest($1::varchar[], $2::varchar[], $3::varchar[], $4::varchar[], $5::varchar[], $6::text[], $7::int[], $8::timestamptz[], $9::varchar[],
         $10::int[], $11::float8[], $12::int[])
         AS t("id", "key_hash", "rollout_id", "group_id", "task_id", "model", "max_context_tokens", "expires_at", "weight_swap",
           "max_calls", "calls_per_second", "call_burst")`,
      [
        all.map((s) => s.id),
        all.map((s) => s.keyHash),
        all.map((s) => s.rolloutId),
        all.map((s) => s.groupId),
        all.map((s) => s.taskId),
        all.map((s) => s.model),
        all.map((s) => s.maxContextTokens),
        all.map((s) => s.expiresAt?.toISOString() ?? null),
        all.map((s) => s.weightSwap),
        all.map((s) => s.maxCalls),
        all.map((s) => s.callsPerSecond),
        all.map((s) => s.callBurst),
      ],
    );
  }

  /** Closes the open ones among `ids` (idempotent) and returns every one that exists. */
  async closeMany(ids: readonly string[]): Promise<GatewaySession[]> {
    await this.sql.query(
      'gw_sessions_close_many',
      `UPDATE "gateway_sessions" SET "status" = 'closed', "closed_at" = now(), "close_reason" = 'closed' WHERE "id" = ANY($1::varchar[]) AND "status" = 'open'`,
      [ids],
    );
    const rows = await this.sql.query<SessionRow>(
      'gw_sessions_by_ids',
      `SELECT ${SESSION_COLUMNS} FROM "gateway_sessions" WHERE "id" = ANY($1::varchar[])`,
      [ids],
    );
    return rows.map(toSession);
  }

  /** The session row (every call reads it: a named statement, no entity hydration). */
  async find(id: string): Promise<GatewaySession | null> {
    const [r] = await this.sql.query<SessionRow>('gw_session_by_id', SESSION_SQL, [id]);
    return r ? toSession(r) : null;
  }

  /** The calls a session recorded, in turn order, with the reply each returned (GET /admin/v1/sessions/:id/calls). */
  async calls(id: string): Promise<SessionCalls['calls']> {
    return (await this.callsOf([id])).get(id) ?? [];
  }

  /** The recorded calls of several sessions at once, each session's in turn order. */
  async callsOf(ids: readonly string[]): Promise<Map<string, SessionCalls['calls']>> {
    const rows = await this.sql.query<{
      id: string;
      session_id: string;
      turn_index: number;
      branch_id: string;
      assistant_message_json: string;
    }>(
      'gw_sessions_calls',
      `SELECT "id", "session_id", "turn_index", "branch_id", "assistant_message_json" FROM "gateway_calls" WHERE "session_id" = ANY($1::varchar[]) ORDER BY "session_id", "turn_index", "id"`,
      [ids],
    );
    const out = new Map<string, SessionCalls['calls']>();
    for (const r of rows) {
      const list = out.get(r.session_id) ?? [];
      list.push({
        callId: r.id,
        turnIndex: Number(r.turn_index),
        branchId: r.branch_id,
        message: JSON.parse(r.assistant_message_json) as SessionCalls['calls'][number]['message'],
      });
      out.set(r.session_id, list);
    }
    return out;
  }

  /** Those of `ids` that have had a call refused over their call budget, with their refusal counts. */
  async budgetSpent(ids: readonly string[]): Promise<BudgetSpentResponse['sessions']> {
    const rows = await this.sql.query<{ id: string; refused_budget: number; refused_rate: number }>(
      'gw_sessions_budget_spent',
      `SELECT "id", "refused_budget", "refused_rate" FROM "gateway_sessions" WHERE "id" = ANY($1::varchar[]) AND "refused_budget" > 0`,
      [ids],
    );
    return rows.map((r) => ({ sessionId: r.id, callsRefused: { budget: Number(r.refused_budget), rate: Number(r.refused_rate) } }));
  }

  /** Closes an open session (idempotent: a closed one keeps its first close time and reason). */
  async close(id: string, reason: 'closed' | 'expired'): Promise<GatewaySession | null> {
    await this.ds.query(
      `UPDATE "gateway_sessions" SET "status" = 'closed', "closed_at" = now(), "close_reason" = $2 WHERE "id" = $1 AND "status" = 'open'`,
      [id, reason],
    );
    return this.find(id);
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
    maxCalls: s.maxCalls,
    callsPerSecond: s.callsPerSecond,
    callBurst: s.callBurst,
    callsAdmitted: s.callsAdmitted,
    callsRefused: { budget: s.refusedBudget, rate: s.refusedRate },
  };
}
