import type { RolloutFinishReason } from '@anvil/contracts';
import { msOf, type Db } from '../sql';

/** One queue row of a group with what settling it needs (its rollout, its calls, its trajectory if published). */
export interface MemberRow {
  rollout_id: string;
  position: string;
  q_status: 'pending' | 'completed' | 'taken' | 'dropped';
  q_reason: string | null;
  settled: boolean;
  sample_index: number | null;
  r_status: string | null;
  finish_reason: RolloutFinishReason | null;
  outcome_reward: number | null;
  num_calls: number | null;
  completed_ms: string | null;
  calls: string;
  truncated_calls: string;
  orphan_calls: string;
  prompt_tokens: string | null;
  output_tokens: string | null;
  loss_masked: boolean | null;
}

export type Fate = { fate: 'done' } | { fate: 'wait' } | { fate: 'drop'; reason: string };

/** Queue reason prefix of an environment failure sent back for retry: its retry replaces it in the group. */
export const RETRIED = 'env_failure_retried';

/** orphan_calls: delta rows whose parent (same rollout, long enough for the reused prefix) is not stored, so their prompts cannot be rebuilt. */
export function readMembers(m: Db, groupId: string): Promise<MemberRow[]> {
  return m.query(
    `SELECT q."rollout_id", q."position", q."status" AS q_status, q."reason" AS q_reason, q."settled_at" IS NOT NULL AS settled,
            r."sample_index", r."status" AS r_status, r."finish_reason", r."outcome_reward", r."num_calls",
            (extract(epoch from r."completed_at") * 1000)::bigint AS completed_ms,
            c.calls, c.truncated_calls, c.orphan_calls, c.prompt_tokens, c.output_tokens, t."loss_masked"
     FROM "data_pool_queue" q
     LEFT JOIN "rollouts" r ON r."id" = q."rollout_id"
     LEFT JOIN "trajectories" t ON t."id" = q."rollout_id"
     LEFT JOIN LATERAL (SELECT count(*) AS calls, count(*) FILTER (WHERE c."finish_reason" = 'length') AS truncated_calls,
                               count(*) FILTER (WHERE c."prompt_prefix_tokens" > 0 AND NOT EXISTS (
                                 SELECT 1 FROM "llm_calls" p WHERE p."id" = c."parent_call_id" AND p."rollout_id" = c."rollout_id"
                                   AND p."prompt_tokens" + p."output_tokens" >= c."prompt_prefix_tokens")) AS orphan_calls,
                               sum(c."prompt_tokens") AS prompt_tokens, sum(c."output_tokens") AS output_tokens
                        FROM "llm_calls" c WHERE c."rollout_id" = q."rollout_id") c ON true
     WHERE q."group_id" = $1 ORDER BY q."position"`,
    [groupId],
  );
}

/**
 * One settlement wave's view of a group's queue rows: who is a member (an environment failure sent
 * back for retry is replaced by its retry, a later row of the same sample index), the rows not
 * settled yet (fresh) and what happens to each of them now (its fate).
 */
export class GroupWave {
  readonly members: Set<string>;
  readonly fresh: MemberRow[];
  readonly freshIds: Set<string>;
  readonly fates: Map<string, Fate>;
  private readonly byId: Map<string, MemberRow>;

  constructor(
    readonly groupId: string,
    readonly rows: MemberRow[],
    readonly timedOut: boolean,
    now: number,
    callWaitMs: number,
  ) {
    this.byId = new Map(rows.map((r) => [r.rollout_id, r]));
    this.members = new Set(
      rows
        .filter((r) => !(retried(r) && rows.some((x) => sameSample(x, r) && Number(x.position) > Number(r.position))))
        .map((r) => r.rollout_id),
    );
    this.fresh = rows.filter((r) => !r.settled);
    this.freshIds = new Set(this.fresh.map((r) => r.rollout_id));
    this.fates = new Map(this.fresh.map((r) => [r.rollout_id, fateOf(r, timedOut, now, callWaitMs)]));
  }

  /** Not timed out, and a member is missing or one must still be waited for. */
  mustWait(groupSize: number): boolean {
    return !this.timedOut && (this.members.size < groupSize || [...this.fates.values()].some((f) => f.fate === 'wait'));
  }

  rowOf(id: string): MemberRow {
    const r = this.byId.get(id);
    if (!r) throw new Error(`group ${this.groupId}: rollout ${id} is not one of its queue rows`);
    return r;
  }

  /** Attempt number: 1 + the retried failures of the same sample index before it. */
  attemptOf(r: MemberRow): number {
    return 1 + this.rows.filter((x) => sameSample(x, r) && Number(x.position) < Number(r.position) && retried(x)).length;
  }

  drop(r: MemberRow, reason: string): void {
    this.fates.set(r.rollout_id, { fate: 'drop', reason });
  }

  /** This wave's dropped rows with their reasons. */
  dropped(): { id: string; reason: string }[] {
    const out: { id: string; reason: string }[] = [];
    for (const r of this.fresh) {
      const fate = this.fates.get(r.rollout_id);
      if (fate?.fate === 'drop') out.push({ id: r.rollout_id, reason: fate.reason });
    }
    return out;
  }

  /** Rows settled in an earlier wave that are (or were) to be trained. */
  publishedBefore(): number {
    return this.rows.filter((r) => r.settled && (r.q_status === 'completed' || r.q_status === 'taken')).length;
  }

  /** The first settlement keeps the plain event id; a later wave's is told apart by its newest queue position. */
  waveSuffix(): string {
    return this.rows.some((r) => r.settled) ? `@${this.fresh.reduce((a, r) => Math.max(a, Number(r.position)), 0)}` : '';
  }
}

const retried = (r: MemberRow) => r.settled && r.q_status === 'dropped' && (r.q_reason ?? '').startsWith(`${RETRIED}:`);
const sameSample = (a: MemberRow, b: MemberRow) => a.sample_index !== null && a.sample_index === b.sample_index;

/** What happens to an unsettled row now: settled with its group, waited for, or dropped with the reason. */
function fateOf(row: MemberRow, timedOut: boolean, now: number, callWaitMs: number): Fate {
  if (row.q_status === 'dropped') return { fate: 'drop', reason: row.q_reason ?? 'dropped_from_queue' };
  if (row.r_status !== 'completed') return timedOut ? { fate: 'drop', reason: 'timeout: the rollout never completed' } : { fate: 'wait' };
  const have = Number(row.calls);
  const want = row.num_calls ?? 0;
  const orphans = Number(row.orphan_calls);
  if (have >= want && orphans === 0) return { fate: 'done' };
  const waited = now - (msOf(row.completed_ms) ?? now);
  if (waited <= callWaitMs && !timedOut) return { fate: 'wait' };
  // Calls may come late (Kafka keeps no order across a gateway's outbox recovery), so both wait
  // callWaitMs. A parent that never comes would make the batch's prefix tree unbuildable (every
  // cut of it would fail), so its rollout is dropped here with the reason, not scheduled.
  if (have < want)
    return {
      fate: 'drop',
      reason: `calls_missing: ${have} of ${want} calls arrived within ${callWaitMs} ms of rollout.completed`,
    };
  return {
    fate: 'drop',
    reason: `parent_missing: ${orphans} call(s) extend a parent call that did not arrive within ${callWaitMs} ms of rollout.completed`,
  };
}
