import type { DataSource, EntityManager } from 'typeorm';
import { createEvent, type EventEnvelope, type RolloutFinishReason } from '@anvil/contracts';
import {
  computeGroupAdvantages,
  filterGroup,
  type AdvantageConfig,
  type FilterConfig,
  type FilterResult,
  type FilterRollout,
  type RolloutScore,
} from '@anvil/rl';
import type { Outbox } from '@anvil/persistence';

export interface SettlementConfig {
  runId: string;
  producer: string;
  advantage: AdvantageConfig;
  filters: FilterConfig;
  callWaitMs: number;
  groupTimeoutMs: number;
  /** Trajectories per train batch: reinforce_pp's batch std spans about this many (absent: the group alone). */
  batchTrajectories?: number;
}

export interface SettlementHooks {
  onSettled?: (status: 'ready' | 'dropped', reason: string | null) => void;
  onDropped?: (reason: string) => void;
}

type Db = Pick<EntityManager, 'query'>;

/** One queue row of a group with what settling it needs (its rollout, its calls, its trajectory if published). */
interface MemberRow {
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

type Fate = { fate: 'done' } | { fate: 'wait' } | { fate: 'drop'; reason: string };

/** Queue reason prefix of an environment failure sent back for retry: its retry replaces it in the group. */
const RETRIED = 'env_failure_retried';

const ms = (v: string | number | null | undefined) => (v === null || v === undefined ? null : Number(v));

/**
 * Settles rollout groups: assembles their trajectories, applies libs/rl's filters (compact
 * filtering, environment failures dropped and sent back for retry up to maxEnvRetries, aborted
 * rollouts dropped, over-long outputs masked or kept, zero-variance drop), computes advantages
 * with the run's estimator, and publishes trajectory.ready and rollout_group.settled through
 * the outbox, in one transaction per group.
 *
 * A group settles in waves. The rollout manager answers retryRolloutIds with new rollouts of the
 * same group and sample index; their rollout.started reopens the group (ingestion), and the next
 * settlement handles only the rows not settled yet (data_pool_queue.settled_at). A retry replaces
 * the failure it retries (a later row of the same sample index; its attempt number counts the
 * failures before it, so maxEnvRetries caps the chain), and the rewards of members settled in an
 * earlier wave stay in the statistics (their trajectories, published then, keep the advantages
 * they were published with; members dropped with their group are not revived).
 */
export class GroupSettlement {
  constructor(
    private readonly ds: DataSource,
    private readonly outbox: Outbox,
    private readonly cfg: SettlementConfig,
    private readonly hooks: SettlementHooks = {},
  ) {}

  /** Settles every group that can settle now; returns how many settled and how many rollouts were dropped. */
  async settleGroups(now: number): Promise<{ groups: number; dropped: number }> {
    // Only groups that may settle now: timed out, or every member queued and none of the unsettled
    // ones still running. Open groups include every group submitted but not yet run (hundreds):
    // reading each one's rollouts every round cost one query per open group per round.
    // settle() still decides (it also waits for calls still arriving).
    const groups: { group_id: string }[] = await this.ds.query(
      `SELECT g."group_id" FROM "data_pool_groups" g
       WHERE g."run_id" = $1 AND g."status" = 'open'
         AND (g."opened_at" < to_timestamp($2::float8 / 1000)
              OR ((SELECT count(*) FROM "data_pool_queue" q WHERE q."group_id" = g."group_id") >= g."group_size"
                  AND NOT EXISTS (SELECT 1 FROM "data_pool_queue" q LEFT JOIN "rollouts" r ON r."id" = q."rollout_id"
                                  WHERE q."group_id" = g."group_id" AND q."settled_at" IS NULL AND q."status" <> 'dropped' AND r."status" IS DISTINCT FROM 'completed')))
       ORDER BY g."opened_at" LIMIT 500`,
      [this.cfg.runId, now - this.cfg.groupTimeoutMs],
    );
    let n = 0;
    let dropped = 0;
    for (const g of groups) {
      const r = await this.settle(g.group_id, now);
      if (r) {
        n++;
        dropped += r.dropped;
      }
    }
    return { groups: n, dropped };
  }

  /** orphan_calls: delta rows whose parent (same rollout, long enough for the reused prefix) is not stored, so their prompts cannot be rebuilt. */
  private members(groupId: string, m: Db): Promise<MemberRow[]> {
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
   * The per-call process rewards of these rollouts, in each rollout's call order (the order of its
   * trajectory's call_ids), or null when the rule is off (processRewardWeight 0), some rollout
   * lacks a process reward for one of its calls, or a rollout's calls are gone (pruned after an
   * earlier wave trained): then every call takes its rollout's advantage.
   */
  private async processRewardsOf(rolloutIds: string[], m: Db): Promise<Map<string, { callIds: string[]; values: number[] }> | null> {
    if (!this.cfg.advantage.processRewardWeight) return null;
    const calls: { rollout_id: string; id: string }[] = await m.query(
      `SELECT "rollout_id", "id" FROM "llm_calls" WHERE "rollout_id" = ANY($1::varchar[]) ORDER BY "rollout_id", "turn_index", "received_at", "id"`,
      [rolloutIds],
    );
    const rewards: { call_id: string; value: number }[] = await m.query(
      `SELECT "call_id", "value" FROM "rewards" WHERE "kind" = 'process' AND "rollout_id" = ANY($1::varchar[])`,
      [rolloutIds],
    );
    const valueOf = new Map(rewards.map((r) => [r.call_id, Number(r.value)]));
    const out = new Map<string, { callIds: string[]; values: number[] }>(rolloutIds.map((id) => [id, { callIds: [], values: [] }]));
    for (const c of calls) {
      const v = valueOf.get(c.id);
      if (v === undefined) return null;
      const r = out.get(c.rollout_id);
      r?.callIds.push(c.id);
      r?.values.push(v);
    }
    for (const r of out.values()) if (r.callIds.length === 0) return null;
    return out;
  }

  /** What happens to an unsettled row now: settled with its group, waited for, or dropped with the reason. */
  private fateOf(row: MemberRow, timedOut: boolean, now: number): Fate {
    if (row.q_status === 'dropped') return { fate: 'drop', reason: row.q_reason ?? 'dropped_from_queue' };
    if (row.r_status !== 'completed') return timedOut ? { fate: 'drop', reason: 'timeout: the rollout never completed' } : { fate: 'wait' };
    const have = Number(row.calls);
    const want = row.num_calls ?? 0;
    const orphans = Number(row.orphan_calls);
    if (have >= want && orphans === 0) return { fate: 'done' };
    const waited = now - (ms(row.completed_ms) ?? now);
    if (waited <= this.cfg.callWaitMs && !timedOut) return { fate: 'wait' };
    // Calls may come late (Kafka keeps no order across a gateway's outbox recovery), so both wait
    // callWaitMs. A parent that never comes would make the batch's prefix tree unbuildable (every
    // cut of it would fail), so its rollout is dropped here with the reason, not scheduled.
    if (have < want)
      return {
        fate: 'drop',
        reason: `calls_missing: ${have} of ${want} calls arrived within ${this.cfg.callWaitMs} ms of rollout.completed`,
      };
    return {
      fate: 'drop',
      reason: `parent_missing: ${orphans} call(s) extend a parent call that did not arrive within ${this.cfg.callWaitMs} ms of rollout.completed`,
    };
  }

  /**
   * reinforce_pp's batch: groups settle one at a time, long before the scheduler cuts the batch
   * they will train in, so the batch std counts this group with the most recently opened groups
   * already ready when it settles (opening order is what the index serves, and it is close to
   * the batch order), enough of them to fill one batch of batchTrajectories: their trained
   * trajectories' rewards, each centred on its own group's mean.
   */
  private async batchPeersOf(groupId: string, groupSize: number, m: Db): Promise<number[]> {
    const peerGroups = Math.ceil((this.cfg.batchTrajectories ?? groupSize) / Math.max(1, groupSize)) - 1;
    if (peerGroups <= 0) return [];
    const rows: { c: number }[] = await m.query(
      `SELECT t."reward" - avg(t."reward") OVER (PARTITION BY t."group_id") AS c
       FROM "trajectories" t
       WHERE NOT t."loss_masked" AND t."group_id" IN (
         SELECT "group_id" FROM "data_pool_groups" WHERE "run_id" = $1 AND "status" = 'ready' AND "group_id" <> $2 ORDER BY "opened_at" DESC LIMIT $3)`,
      [this.cfg.runId, groupId, peerGroups],
    );
    return rows.map((r) => Number(r.c));
  }

  /**
   * Settles one group once every member has completed with all its calls (or was dropped), or
   * the group timed out. Returns null while it must wait (or when it is not open any more).
   * Reads and writes under the group row's lock: a rollout.started that reopens the group takes
   * the same lock, so its row is either seen here or reopens the group after this commits.
   */
  private async settle(groupId: string, now: number): Promise<{ dropped: number } | null> {
    let out: { dropped: number; status: 'ready' | 'dropped'; reason: string | null; drops: string[] } | null = null;
    await this.outbox.transaction(async (m) => {
      const [g]: { status: string; task_id: string; group_size: number; opened_ms: string }[] = await m.query(
        `SELECT "status", "task_id", "group_size", (extract(epoch from "opened_at") * 1000)::bigint AS opened_ms FROM "data_pool_groups" WHERE "group_id" = $1 FOR UPDATE`,
        [groupId],
      );
      if (!g || g.status !== 'open') return;
      const timedOut = now - Number(g.opened_ms) > this.cfg.groupTimeoutMs;
      const rows = await this.members(groupId, m);
      // an environment failure sent back for retry is replaced by its retry (a later row of the same sample index)
      const retried = (r: MemberRow) => r.settled && r.q_status === 'dropped' && (r.q_reason ?? '').startsWith(`${RETRIED}:`);
      const sameSample = (a: MemberRow, b: MemberRow) => a.sample_index !== null && a.sample_index === b.sample_index;
      const members = new Set(
        rows
          .filter((r) => !(retried(r) && rows.some((x) => sameSample(x, r) && Number(x.position) > Number(r.position))))
          .map((r) => r.rollout_id),
      );
      const fresh = rows.filter((r) => !r.settled);
      const fates = new Map(fresh.map((r) => [r.rollout_id, this.fateOf(r, timedOut, now)]));
      if (!timedOut && (members.size < g.group_size || [...fates.values()].some((f) => f.fate === 'wait'))) return;
      if (fresh.length === 0) {
        // reopened without a new row (cannot happen through ingestion, which reopens only on a new queue row): close it again, nothing to announce
        await m.query(
          `UPDATE "data_pool_groups" SET "status" = CASE WHEN $2 THEN 'ready' ELSE 'dropped' END, "settled_at" = now() WHERE "group_id" = $1`,
          [groupId, rows.some((r) => r.q_status === 'completed' || r.q_status === 'taken')],
        );
        return;
      }

      // attempt number: 1 + the retried failures of the same sample index before it
      const attemptOf = (r: MemberRow) =>
        1 + rows.filter((x) => sameSample(x, r) && Number(x.position) < Number(r.position) && retried(x)).length;
      const drop = (r: MemberRow, reason: string) => fates.set(r.rollout_id, { fate: 'drop', reason });
      // the filters' input: this wave's completed members, and the members settled in an earlier
      // wave whose reward counted then (published, or dropped with their group)
      const input: FilterRollout[] = [];
      const byId = new Map(rows.map((r) => [r.rollout_id, r]));
      const rowOf = (id: string): MemberRow => {
        const r = byId.get(id);
        if (!r) throw new Error(`group ${groupId}: rollout ${id} is not one of its queue rows`);
        return r;
      };
      const f = this.cfg.filters;
      for (const id of members) {
        const r = rowOf(id);
        if (!r.settled) {
          if (fates.get(id)?.fate !== 'done') continue;
          const reason = r.finish_reason as RolloutFinishReason;
          const failed = f.envErrorReasons.includes(reason) || f.dropReasons.includes(reason);
          if (!failed && r.outcome_reward === null) drop(r, `no_reward: ${reason}`);
          else if (!failed && Number(r.calls) === 0) drop(r, 'no_calls');
          else
            input.push({
              rolloutId: id,
              finishReason: reason,
              reward: failed ? null : Number(r.outcome_reward),
              outputTruncated: Number(r.truncated_calls) > 0,
              attempts: attemptOf(r),
            });
          continue;
        }
        const scored =
          r.q_status === 'completed' || r.q_status === 'taken' || (r.q_status === 'dropped' && r.q_reason?.startsWith('group_dropped:'));
        if (scored && r.finish_reason !== null && r.outcome_reward !== null)
          input.push({
            rolloutId: id,
            finishReason: r.finish_reason,
            reward: Number(r.outcome_reward),
            outputTruncated: Number(r.truncated_calls) > 0 || r.loss_masked === true,
          });
      }
      const freshIds = new Set(fresh.map((r) => r.rollout_id));
      const result: FilterResult | null = input.some((x) => freshIds.has(x.rolloutId)) ? filterGroup(input, f) : null;
      const retry = (result?.retry ?? []).filter((id) => freshIds.has(id));
      if (result) {
        for (const id of result.dropped) {
          if (!freshIds.has(id)) continue;
          const r = rowOf(id);
          const a = attemptOf(r);
          if (!f.envErrorReasons.includes(r.finish_reason as string)) drop(r, `dropped: ${String(r.finish_reason)}`);
          else if (retry.includes(id)) drop(r, `${RETRIED}: ${String(r.finish_reason)} on attempt ${a} of at most ${1 + f.maxEnvRetries}`);
          else drop(r, `env_failure_exhausted: ${String(r.finish_reason)} on attempt ${a} (maxEnvRetries ${f.maxEnvRetries})`);
        }
        if (result.decision === 'drop')
          for (const id of result.lossWeights.keys()) if (freshIds.has(id)) drop(rowOf(id), `group_dropped: ${result.reason}`);
      }
      // what trains: this wave's members the filters kept (weight 0 = kept for statistics only)
      const publish = result && result.decision === 'keep' ? [...result.lossWeights.entries()].filter(([id]) => freshIds.has(id)) : [];
      let advOf = new Map<string, { advantage: number; perCall: number[] | null }>();
      let difficulty: number | null = null;
      if (result && result.decision === 'keep') {
        const kept = [...result.lossWeights.entries()];
        const process = await this.processRewardsOf(
          kept.map(([id]) => id),
          m,
        );
        const scores: RolloutScore[] = kept.map(([id, w]) => {
          const p = process?.get(id);
          return {
            rolloutId: id,
            outcomeReward: Number(rowOf(id).outcome_reward),
            masked: w === 0,
            ...(p ? { processRewards: p.values } : {}),
          };
        });
        const batchPeers = this.cfg.advantage.estimator === 'reinforce_pp' ? await this.batchPeersOf(groupId, g.group_size, m) : undefined;
        const adv = computeGroupAdvantages(g.task_id, scores, this.cfg.advantage, { batchPeers });
        advOf = new Map(
          kept.map(([id, w], i) => [
            id,
            { advantage: w === 0 ? 0 : (adv.perRollout[i] ?? 0), perCall: w !== 0 && adv.perCall ? adv.perCall[i] : null },
          ]),
        );
        difficulty = 1 - kept.reduce((a, [id]) => a + Number(rowOf(id).outcome_reward), 0) / kept.length;
      }

      const events: EventEnvelope[] = [];
      const trajectoryIds: string[] = [];
      const published = publish.map(([id]) => id);
      // Each published rollout's calls in turn order and the policy versions of their outputs, in
      // one statement (a set of statements per member cost a round trip each, the group's lock held).
      const calls: { rollout_id: string; call_ids: string[]; min_v: number | null; max_v: number | null }[] = published.length
        ? await m.query(
            `SELECT "rollout_id", array_agg("id" ORDER BY "turn_index", "received_at", "id") AS call_ids, min(v) AS min_v, max(v) AS max_v FROM (
               SELECT "rollout_id", "id", "turn_index", "received_at",
                      CASE WHEN octet_length("output_versions") >= 4
                           THEN get_byte("output_versions", 0) + 256 * get_byte("output_versions", 1) + 65536 * get_byte("output_versions", 2) END AS v
               FROM "llm_calls" WHERE "rollout_id" = ANY($1::varchar[])) x GROUP BY "rollout_id"`,
            [published],
          )
        : [];
      const callsOf = new Map(calls.map((c) => [c.rollout_id, c]));
      const drops: string[] = [];
      const dropped: { id: string; reason: string }[] = [];
      for (const r of fresh) {
        const fate = fates.get(r.rollout_id);
        if (fate?.fate !== 'drop') continue;
        drops.push(fate.reason.split(':')[0]);
        dropped.push({ id: r.rollout_id, reason: fate.reason });
      }
      if (dropped.length)
        await m.query(
          `UPDATE "data_pool_queue" q SET "status" = 'dropped', "reason" = coalesce(q."reason", x."reason"), "settled_at" = now()
           FROM unnest($1::varchar[], $2::text[]) AS x("rollout_id", "reason") WHERE q."rollout_id" = x."rollout_id" AND q."settled_at" IS NULL`,
          [dropped.map((d) => d.id), dropped.map((d) => d.reason)],
        );
      const rowsOut: Record<string, unknown>[] = [];
      for (const [id, weight] of publish) {
        const row = rowOf(id);
        const masked = weight === 0;
        const a = advOf.get(id);
        const c = callsOf.get(id);
        const minV = Number(c?.min_v ?? 0);
        const maxV = Number(c?.max_v ?? 0);
        const payload = {
          trajectoryId: id,
          rolloutId: id,
          groupId,
          taskId: g.task_id,
          callIds: c?.call_ids ?? [],
          finishReason: row.finish_reason as RolloutFinishReason,
          reward: Number(row.outcome_reward),
          advantage: a?.advantage ?? 0,
          lossMasked: masked,
          minPolicyVersion: minV,
          maxPolicyVersion: maxV,
          promptTokens: Number(row.prompt_tokens ?? 0),
          outputTokens: Number(row.output_tokens ?? 0),
          readyAt: now,
        };
        // per-call advantages, aligned with call_ids (the order processRewardsOf used)
        const perCall = a?.perCall && a.perCall.length === payload.callIds.length ? a.perCall : null;
        rowsOut.push({
          id,
          call_ids: payload.callIds,
          finish_reason: payload.finishReason,
          reward: payload.reward,
          advantage: payload.advantage,
          loss_masked: masked,
          min_v: minV,
          max_v: maxV,
          prompt_tokens: payload.promptTokens,
          output_tokens: payload.outputTokens,
          call_advantages: perCall,
          tokens: payload.promptTokens + payload.outputTokens,
          completed_ms: ms(row.completed_ms) ?? now,
        });
        trajectoryIds.push(id);
        events.push(createEvent('trajectory.ready', payload, { key: id, producer: this.cfg.producer, id: `trajectory.ready:${id}` }));
      }
      if (rowsOut.length) {
        const rowsJson = JSON.stringify(rowsOut);
        // the trajectories and their queue rows, one statement each for the whole wave (ragged call
        // ids and per-call advantages travel as JSON; float8 from JSON's shortest decimal is exact)
        const cols = `"id" varchar, "call_ids" text[], "finish_reason" varchar, "reward" float8, "advantage" float8, "loss_masked" boolean, "min_v" int, "max_v" int,
                      "prompt_tokens" int, "output_tokens" int, "call_advantages" float8[], "tokens" int, "completed_ms" float8`;
        await m.query(
          `INSERT INTO "trajectories" ("id", "event_id", "rollout_id", "group_id", "task_id", "call_ids", "finish_reason", "reward", "advantage", "loss_masked",
             "min_policy_version", "max_policy_version", "prompt_tokens", "output_tokens", "ready_at", "status", "train_batch_id", "call_advantages")
           SELECT x."id", 'trajectory.ready:' || x."id", x."id", $2, $3, x."call_ids", x."finish_reason", x."reward", x."advantage", x."loss_masked",
             x."min_v", x."max_v", x."prompt_tokens", x."output_tokens", to_timestamp($4::float8 / 1000.0), 'ready', NULL, x."call_advantages"
           FROM jsonb_to_recordset($1::jsonb) AS x(${cols}) ON CONFLICT DO NOTHING`,
          [rowsJson, groupId, g.task_id, now],
        );
        await m.query(
          `UPDATE "data_pool_queue" q SET "status" = 'completed', "tokens" = x."tokens", "version" = x."min_v", "difficulty" = coalesce(q."difficulty", $2), "trajectory_id" = x."id",
             "completed_at" = to_timestamp(x."completed_ms" / 1000.0), "settled_at" = now()
           FROM jsonb_to_recordset($1::jsonb) AS x(${cols}) WHERE q."rollout_id" = x."id" AND q."settled_at" IS NULL`,
          [rowsJson, difficulty],
        );
      }
      // 'ready' while any trajectory of the group (this wave's or an earlier one's) is to be trained
      const publishedInAll =
        trajectoryIds.length + rows.filter((r) => r.settled && (r.q_status === 'completed' || r.q_status === 'taken')).length;
      const status: 'ready' | 'dropped' = publishedInAll > 0 ? 'ready' : 'dropped';
      const reason =
        result?.reason ??
        (!result && publishedInAll === 0
          ? timedOut
            ? 'timeout'
            : 'no_trainable'
          : timedOut
            ? `timeout: settled with ${publishedInAll} of ${g.group_size} rollouts`
            : null);
      await m.query(`UPDATE "data_pool_groups" SET "status" = $2, "reason" = $3, "settled_at" = now() WHERE "group_id" = $1`, [
        groupId,
        status,
        reason,
      ]);
      // the first settlement keeps the plain id; a later wave's is told apart by its newest queue position
      const wave = rows.some((r) => r.settled) ? `@${fresh.reduce((a, r) => Math.max(a, Number(r.position)), 0)}` : '';
      events.push(
        createEvent(
          'rollout_group.settled',
          { groupId, taskId: g.task_id, status, reason, trajectoryIds, retryRolloutIds: retry },
          { key: groupId, producer: this.cfg.producer, id: `rollout_group.settled:${groupId}${wave}` },
        ),
      );
      await this.outbox.enqueue(m, events);
      out = { dropped: drops.length, status, reason, drops };
    });
    const done = out as { dropped: number; status: 'ready' | 'dropped'; reason: string | null; drops: string[] } | null;
    if (!done) return null;
    for (const d of done.drops) this.hooks.onDropped?.(d);
    this.hooks.onSettled?.(done.status, done.reason);
    return { dropped: done.dropped };
  }
}
