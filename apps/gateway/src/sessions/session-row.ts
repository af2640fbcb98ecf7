import { GatewaySession } from '@anvil/persistence';

/** A gateway_sessions row as the raw per-call queries read it (snake_case columns). */
export interface SessionRow {
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
  weight_swap: string | null;
  max_calls: number | null;
  calls_per_second: number | null;
  call_burst: number | null;
  calls_admitted: number;
  refused_budget: number;
  refused_rate: number;
}

export const SESSION_COLUMNS = `"id", "key_hash", "rollout_id", "group_id", "task_id", "model", "max_context_tokens", "status", "expires_at",
  "policy_version_at_start", "call_count", "branch_count", "created_at", "closed_at", "close_reason", "weight_swap",
  "max_calls", "calls_per_second", "call_burst", "calls_admitted", "refused_budget", "refused_rate"`;

export const SESSION_SQL = `SELECT ${SESSION_COLUMNS} FROM "gateway_sessions" WHERE "id" = $1`;

export function toSession(r: SessionRow): GatewaySession {
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
    weightSwap: r.weight_swap === 'finish' || r.weight_swap === 'abort-and-resume' ? r.weight_swap : null,
    maxCalls: r.max_calls,
    callsPerSecond: r.calls_per_second === null ? null : Number(r.calls_per_second),
    callBurst: r.call_burst,
    callsAdmitted: r.calls_admitted,
    refusedBudget: r.refused_budget,
    refusedRate: r.refused_rate,
  });
}
