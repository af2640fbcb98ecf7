import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import { createEvent, type EventEnvelope, type RolloutFinishReason, type TrainBatchStats } from '@anvil/contracts';
import { computeGroupAdvantages, WindowedFifo, type AdvantageConfig, type RolloutScore, type WindowConfig, type WindowedFifoState } from '@anvil/rl';
import type { Outbox } from '@anvil/persistence';
import { PrefixTreeBuilder, writeTrainBatchBlob } from '@anvil/train-batch';
import { CallStore, orderParentsFirst } from './call-store';

export interface DataPoolConfig {
  /** One scheduler, one queue and one step counter per run. */
  runId: string;
  /** Event producer name (and the outbox's). */
  producer: string;
  /** This instance's name in the scheduler lease. */
  owner: string;
  advantage: AdvantageConfig;
  /** Compact filtering (DeepSWE): kept for statistics, loss weight 0. */
  compactReasons: RolloutFinishReason[];
  /** Environment failures: dropped and asked to be retried (retryRolloutIds). */
  envFailureReasons: RolloutFinishReason[];
  dropZeroVariance: boolean;
  /** Windowed FIFO: N in flight, W fixed or 'adaptive', head age limit. */
  window: WindowConfig;
  /** Cut a batch of exactly this many trajectories (count mode) ... */
  batchTrajectories?: number;
  /** ... or fill up to this many tokens (token-budget mode; prompt + output over samples). */
  batchTokens?: number;
  /** Token staleness statistic: share of output tokens more than k versions old. */
  stalenessK: number;
  /** A completed rollout waits this long for its missing calls, then is dropped with the reason. */
  callWaitMs: number;
  /** A group not settled this long after its first rollout started is settled with what completed. */
  groupTimeoutMs: number;
  /** The scheduler lease: renewed every tick, taken over when it lapses. */
  leaseMs: number;
}

export function dataPoolConfig(input: Partial<DataPoolConfig> = {}): DataPoolConfig {
  const c: DataPoolConfig = {
    runId: 'default',
    producer: 'data-pool',
    owner: `data-pool-${randomUUID().slice(0, 8)}`,
    advantage: { estimator: 'grpo' },
    compactReasons: ['max_context', 'max_steps', 'timeout'],
    envFailureReasons: ['env_error'],
    dropZeroVariance: true,
    window: { inFlight: 8 },
    stalenessK: 2,
    callWaitMs: 30_000,
    groupTimeoutMs: 30 * 60_000,
    leaseMs: 10_000,
    ...input,
  };
  const problems: string[] = [];
  if (c.batchTrajectories === undefined && c.batchTokens === undefined) c.batchTrajectories = 4;
  if (c.batchTrajectories !== undefined && !(Number.isInteger(c.batchTrajectories) && c.batchTrajectories > 0))
    problems.push(`batchTrajectories: must be a positive integer, got ${c.batchTrajectories}`);
  if (c.batchTokens !== undefined && !(Number.isInteger(c.batchTokens) && c.batchTokens > 0)) problems.push(`batchTokens: must be a positive integer, got ${c.batchTokens}`);
  for (const k of ['callWaitMs', 'groupTimeoutMs', 'leaseMs', 'stalenessK'] as const) if (!(Number.isFinite(c[k]) && c[k] >= 0)) problems.push(`${k}: must be a non-negative number, got ${c[k]}`);
  if (problems.length) throw new DataPoolConfigError(problems);
  return c;
}

export class DataPoolConfigError extends Error {
  override name = 'DataPoolConfigError';
  constructor(readonly problems: string[]) {
    super(`invalid Data Pool config: ${problems.join('; ')}`);
  }
}

/** Another instance holds the run's scheduler lease (or took it over meanwhile): nothing was cut. */
export class NotSchedulerError extends Error {
  override name = 'NotSchedulerError';
}

export interface TickResult {
  active: boolean;
  settledGroups: number;
  droppedRollouts: number;
  batches: string[];
  requeued: number;
}

interface QueueRow {
  rollout_id: string;
  group_id: string;
  task_id: string;
  position: string;
  status: 'pending' | 'completed' | 'taken' | 'dropped';
  reason: string | null;
  tokens: number | null;
  version: number | null;
  difficulty: number | null;
  submitted_ms: string;
  completed_ms: string | null;
}

interface GroupRolloutRow {
  rollout_id: string;
  q_status: QueueRow['status'];
  r_status: string | null;
  finish_reason: RolloutFinishReason | null;
  outcome_reward: number | null;
  num_calls: number | null;
  completed_ms: string | null;
  calls: string;
  prompt_tokens: string | null;
  output_tokens: string | null;
  min_version: number | null;
  max_version: number | null;
}

/** TypeORM's query() answers UPDATE/DELETE ... RETURNING with [rows, affected]: the rows. */
export function returned<T>(result: unknown): T[] {
  if (Array.isArray(result) && result.length === 2 && Array.isArray(result[0]) && typeof result[1] === 'number') return result[0] as T[];
  return result as T[];
}

const ms = (v: string | number | null | undefined) => (v === null || v === undefined ? null : Number(v));

/**
 * The Data Pool's decisions, all from database state so any instance can take over:
 * assembling trajectories, settling groups (advantages, filters), the Windowed-FIFO schedule
 * and the batch cut (claim-check blob + train_batch.created through the outbox, one
 * transaction, fenced by the run's scheduler row).
 */
export class DataPool {
  readonly calls: CallStore;
  private lastWindow: number | null = null;

  constructor(
    private readonly ds: DataSource,
    private readonly outbox: Outbox,
    readonly cfg: DataPoolConfig,
    private readonly hooks: {
      onBatch?: (id: string, stats: TrainBatchStats) => void;
      onSettled?: (status: 'ready' | 'dropped', reason: string | null) => void;
      onDropped?: (reason: string) => void;
      warn?: (msg: string, fields: Record<string, unknown>) => void;
    } = {},
  ) {
    this.calls = new CallStore(ds);
  }

  /** Takes or renews the run's scheduler lease; true when this instance is the active scheduler. */
  async acquireLease(): Promise<boolean> {
    await this.ds.query(`INSERT INTO "data_pool_scheduler" ("run_id") VALUES ($1) ON CONFLICT DO NOTHING`, [this.cfg.runId]);
    const rows = returned(
      await this.ds.query(
        `UPDATE "data_pool_scheduler" SET "owner" = $2, "lease_until" = now() + make_interval(secs => $3::float8)
       WHERE "run_id" = $1 AND ("owner" IS NULL OR "owner" = $2 OR "lease_until" < now()) RETURNING "owner"`,
        [this.cfg.runId, this.cfg.owner, this.cfg.leaseMs / 1000],
      ),
    );
    return rows.length > 0;
  }

  /** Gives the lease up (graceful stop): another instance takes over at once. */
  async releaseLease(): Promise<void> {
    await this.ds.query(`UPDATE "data_pool_scheduler" SET "owner" = NULL, "lease_until" = NULL WHERE "run_id" = $1 AND "owner" = $2`, [this.cfg.runId, this.cfg.owner]);
  }

  /** One round: lease, re-queue refused batches, settle groups, schedule and cut batches. */
  async tick(now = Date.now()): Promise<TickResult> {
    // one round at a time per instance (the runtime's timer, its event kicks and callers share it)
    const prev = this.round;
    let done!: () => void;
    this.round = new Promise<void>((r) => (done = r));
    await prev;
    try {
      return await this.tickOnce(now);
    } finally {
      done();
    }
  }

  private round: Promise<void> = Promise.resolve();

  private async tickOnce(now: number): Promise<TickResult> {
    const result: TickResult = { active: false, settledGroups: 0, droppedRollouts: 0, batches: [], requeued: 0 };
    if (!(await this.acquireLease())) return result;
    result.active = true;
    result.requeued = await this.requeueRefused();
    const settled = await this.settleGroups(now);
    result.settledGroups = settled.groups;
    result.droppedRollouts = settled.dropped;
    for (let i = 0; i < 64; i++) {
      const id = await this.scheduleOnce(Date.now());
      if (!id) break;
      result.batches.push(id);
    }
    return result;
  }

  // ---------------------------------------------------------------- groups

  private async settleGroups(now: number): Promise<{ groups: number; dropped: number }> {
    // Only groups that may settle now: timed out, or every member queued and none still running.
    // Open groups include every group submitted but not yet run (hundreds): reading each one's
    // rollouts every round cost one query per open group per round, the embedded loop's largest
    // database cost. trySettle still decides (it also waits for calls still arriving).
    const groups: { group_id: string; task_id: string; group_size: number; opened_ms: string }[] = await this.ds.query(
      `SELECT g."group_id", g."task_id", g."group_size", (extract(epoch from g."opened_at") * 1000)::bigint AS opened_ms FROM "data_pool_groups" g
       WHERE g."run_id" = $1 AND g."status" = 'open'
         AND (g."opened_at" < to_timestamp($2::float8 / 1000)
              OR ((SELECT count(*) FROM "data_pool_queue" q WHERE q."group_id" = g."group_id") >= g."group_size"
                  AND NOT EXISTS (SELECT 1 FROM "data_pool_queue" q LEFT JOIN "rollouts" r ON r."id" = q."rollout_id"
                                  WHERE q."group_id" = g."group_id" AND q."status" <> 'dropped' AND r."status" IS DISTINCT FROM 'completed')))
       ORDER BY g."opened_at" LIMIT 500`,
      [this.cfg.runId, now - this.cfg.groupTimeoutMs],
    );
    let n = 0;
    let dropped = 0;
    for (const g of groups) {
      const r = await this.trySettle(g.group_id, g.task_id, g.group_size, now - Number(g.opened_ms) > this.cfg.groupTimeoutMs, now);
      if (r) {
        n++;
        dropped += r.dropped;
      }
    }
    return { groups: n, dropped };
  }

  private async groupRollouts(groupId: string, m: Pick<EntityManager, 'query'>): Promise<GroupRolloutRow[]> {
    return m.query(
      `SELECT q."rollout_id", q."status" AS q_status, r."status" AS r_status, r."finish_reason", r."outcome_reward", r."num_calls",
              (extract(epoch from r."completed_at") * 1000)::bigint AS completed_ms,
              (SELECT count(*) FROM "llm_calls" c WHERE c."rollout_id" = q."rollout_id") AS calls,
              (SELECT sum(c."prompt_tokens") FROM "llm_calls" c WHERE c."rollout_id" = q."rollout_id") AS prompt_tokens,
              (SELECT sum(c."output_tokens") FROM "llm_calls" c WHERE c."rollout_id" = q."rollout_id") AS output_tokens,
              NULL::integer AS min_version, NULL::integer AS max_version
       FROM "data_pool_queue" q LEFT JOIN "rollouts" r ON r."id" = q."rollout_id" WHERE q."group_id" = $1 ORDER BY q."position"`,
      [groupId],
    );
  }

  /**
   * Settles a group once every rollout has completed with all its calls (or was dropped), or
   * the group timed out. Returns null while it must wait.
   */
  /**
   * The per-call process rewards of these rollouts, in each rollout's call order (the order of its
   * trajectory's call_ids), or null when the rule is off (processRewardWeight 0) or some rollout
   * lacks a process reward for one of its calls: then every call takes its rollout's advantage.
   */
  private async processRewardsOf(rolloutIds: string[]): Promise<Map<string, { callIds: string[]; values: number[] }> | null> {
    if (!this.cfg.advantage.processRewardWeight) return null;
    const calls: { rollout_id: string; id: string }[] = await this.ds.query(
      `SELECT "rollout_id", "id" FROM "llm_calls" WHERE "rollout_id" = ANY($1::varchar[]) ORDER BY "rollout_id", "turn_index", "received_at", "id"`,
      [rolloutIds],
    );
    const rewards: { call_id: string; value: number }[] = await this.ds.query(`SELECT "call_id", "value" FROM "rewards" WHERE "kind" = 'process' AND "rollout_id" = ANY($1::varchar[])`, [rolloutIds]);
    const valueOf = new Map(rewards.map((r) => [r.call_id, Number(r.value)]));
    const out = new Map<string, { callIds: string[]; values: number[] }>(rolloutIds.map((id) => [id, { callIds: [], values: [] }]));
    for (const c of calls) {
      const v = valueOf.get(c.id);
      if (v === undefined) return null;
      const r = out.get(c.rollout_id);
      r?.callIds.push(c.id);
      r?.values.push(v);
    }
    return out;
  }

  private async trySettle(groupId: string, taskId: string, groupSize: number, timedOut: boolean, now: number): Promise<{ dropped: number } | null> {
    const rows = await this.groupRollouts(groupId, this.ds);
    type State = { row: GroupRolloutRow; fate: 'done' | 'wait' | 'drop'; reason?: string };
    const states: State[] = rows.map((row) => {
      if (row.q_status === 'dropped') return { row, fate: 'drop', reason: 'dropped_from_queue' };
      if (row.r_status !== 'completed') return timedOut ? { row, fate: 'drop', reason: 'timeout: the rollout never completed' } : { row, fate: 'wait' };
      const have = Number(row.calls);
      const want = row.num_calls ?? 0;
      if (have >= want) return { row, fate: 'done' };
      const waited = now - (ms(row.completed_ms) ?? now);
      if (waited > this.cfg.callWaitMs || timedOut) return { row, fate: 'drop', reason: `calls_missing: ${have} of ${want} calls arrived within ${this.cfg.callWaitMs} ms of rollout.completed` };
      return { row, fate: 'wait' };
    });
    if (!timedOut && (rows.length < groupSize || states.some((s) => s.fate === 'wait'))) return null;

    const retry: string[] = [];
    const kept: { s: State; masked: boolean }[] = [];
    for (const s of states) {
      if (s.fate !== 'done') continue;
      const reason = s.row.finish_reason as RolloutFinishReason;
      if (this.cfg.envFailureReasons.includes(reason)) {
        s.fate = 'drop';
        s.reason = `env_failure: ${reason}`;
        retry.push(s.row.rollout_id);
      } else if (reason === 'aborted' || s.row.outcome_reward === null) {
        s.fate = 'drop';
        s.reason = `no_reward: ${reason}`;
      } else if (Number(s.row.calls) === 0) {
        s.fate = 'drop';
        s.reason = 'no_calls';
      } else kept.push({ s, masked: this.cfg.compactReasons.includes(reason) });
    }
    let status: 'ready' | 'dropped' = 'ready';
    let groupReason: string | null = null;
    let adv: number[] = [];
    let callAdv: number[][] | null = null;
    let process: Map<string, { callIds: string[]; values: number[] }> | null = null;
    let mean = 0;
    if (kept.length === 0) {
      status = 'dropped';
      groupReason = retry.length > 0 && retry.length === states.filter((s) => s.row.r_status === 'completed').length ? 'all_env_error' : timedOut ? 'timeout' : 'no_trainable_rollouts';
    } else {
      process = await this.processRewardsOf(kept.map((k) => k.s.row.rollout_id));
      const scores: RolloutScore[] = kept.map((k) => {
        const p = process?.get(k.s.row.rollout_id);
        return { rolloutId: k.s.row.rollout_id, outcomeReward: Number(k.s.row.outcome_reward), masked: k.masked, ...(p ? { processRewards: p.values } : {}) };
      });
      const unmasked = kept.filter((k) => !k.masked);
      if (unmasked.length === 0) {
        status = 'dropped';
        groupReason = 'all_compact_filtered';
      } else {
        const g = computeGroupAdvantages(taskId, scores, this.cfg.advantage);
        adv = g.perRollout;
        callAdv = g.perCall ?? null;
        mean = g.mean;
        if (g.zeroVariance && this.cfg.dropZeroVariance) {
          status = 'dropped';
          groupReason = 'zero_variance';
        }
      }
      if (timedOut && status === 'ready') groupReason = `timeout: settled with ${kept.length} of ${groupSize} rollouts`;
    }
    const difficulty = kept.length ? 1 - kept.reduce((a, k) => a + Number(k.s.row.outcome_reward), 0) / kept.length : null;

    let droppedCount = 0;
    const events: EventEnvelope[] = [];
    const trajectoryIds: string[] = [];
    await this.outbox.transaction(async (m) => {
      const [g]: { status: string }[] = await m.query(`SELECT "status" FROM "data_pool_groups" WHERE "group_id" = $1 FOR UPDATE`, [groupId]);
      if (!g || g.status !== 'open') return;
      const versions: { rollout_id: string; min_v: number | null; max_v: number | null }[] = await m.query(
        `SELECT "rollout_id", min(v) AS min_v, max(v) AS max_v FROM (
           SELECT "rollout_id", get_byte("output_versions", 0) + 256 * get_byte("output_versions", 1) + 65536 * get_byte("output_versions", 2) AS v
           FROM "llm_calls" WHERE "rollout_id" = ANY($1::varchar[]) AND octet_length("output_versions") >= 4) x GROUP BY "rollout_id"`,
        [kept.map((k) => k.s.row.rollout_id)],
      );
      const vOf = new Map(versions.map((v) => [v.rollout_id, v]));
      for (const s of states) {
        if (s.fate === 'drop') {
          droppedCount++;
          this.hooks.onDropped?.(s.reason?.split(':')[0] ?? 'dropped');
          await m.query(`UPDATE "data_pool_queue" SET "status" = 'dropped', "reason" = coalesce("reason", $2) WHERE "rollout_id" = $1 AND "status" IN ('pending', 'completed')`, [
            s.row.rollout_id,
            s.reason ?? 'dropped',
          ]);
        }
      }
      for (const [i, k] of kept.entries()) {
        const row = k.s.row;
        const id = row.rollout_id;
        if (status === 'dropped') {
          droppedCount++;
          await m.query(`UPDATE "data_pool_queue" SET "status" = 'dropped', "reason" = $2 WHERE "rollout_id" = $1 AND "status" IN ('pending', 'completed')`, [id, `group_dropped: ${groupReason}`]);
          continue;
        }
        const callIds: { id: string }[] = await m.query(`SELECT "id" FROM "llm_calls" WHERE "rollout_id" = $1 ORDER BY "turn_index", "received_at", "id"`, [id]);
        // Per-call advantages, aligned with call_ids (the order processRewardsOf used).
        const perCall = callAdv && !k.masked ? callAdv[i] : null;
        const v = vOf.get(id);
        const minV = v?.min_v ?? 0;
        const maxV = v?.max_v ?? 0;
        const tokens = Number(row.prompt_tokens ?? 0) + Number(row.output_tokens ?? 0);
        const payload = {
          trajectoryId: id,
          rolloutId: id,
          groupId,
          taskId,
          callIds: callIds.map((c) => c.id),
          finishReason: row.finish_reason as RolloutFinishReason,
          reward: Number(row.outcome_reward),
          advantage: k.masked ? 0 : (adv[i] ?? 0),
          lossMasked: k.masked,
          minPolicyVersion: Number(minV),
          maxPolicyVersion: Number(maxV),
          promptTokens: Number(row.prompt_tokens ?? 0),
          outputTokens: Number(row.output_tokens ?? 0),
          readyAt: now,
        };
        await m.query(
          `INSERT INTO "trajectories" ("id", "event_id", "rollout_id", "group_id", "task_id", "call_ids", "finish_reason", "reward", "advantage", "loss_masked",
             "min_policy_version", "max_policy_version", "prompt_tokens", "output_tokens", "ready_at", "status", "train_batch_id", "call_advantages")
           VALUES ($1, $2, $1, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, to_timestamp($14::float8 / 1000.0), 'ready', NULL, $15) ON CONFLICT DO NOTHING`,
          [
            id,
            `trajectory.ready:${id}`,
            groupId,
            taskId,
            payload.callIds,
            payload.finishReason,
            payload.reward,
            payload.advantage,
            payload.lossMasked,
            payload.minPolicyVersion,
            payload.maxPolicyVersion,
            payload.promptTokens,
            payload.outputTokens,
            now,
            perCall && perCall.length === payload.callIds.length ? perCall : null,
          ],
        );
        await m.query(
          `UPDATE "data_pool_queue" SET "status" = 'completed', "tokens" = $2, "version" = $3, "difficulty" = coalesce("difficulty", $4), "trajectory_id" = $1,
             "completed_at" = to_timestamp($5::float8 / 1000.0) WHERE "rollout_id" = $1 AND "status" = 'pending'`,
          [id, tokens, Number(minV), difficulty, ms(row.completed_ms) ?? now],
        );
        trajectoryIds.push(id);
        events.push(createEvent('trajectory.ready', payload, { key: id, producer: this.cfg.producer, id: `trajectory.ready:${id}` }));
      }
      await m.query(`UPDATE "data_pool_groups" SET "status" = $2, "reason" = $3, "settled_at" = now() WHERE "group_id" = $1`, [groupId, status, groupReason]);
      events.push(
        createEvent(
          'rollout_group.settled',
          { groupId, taskId, status, reason: groupReason, trajectoryIds, retryRolloutIds: retry },
          { key: groupId, producer: this.cfg.producer, id: `rollout_group.settled:${groupId}` },
        ),
      );
      await this.outbox.enqueue(m, events);
    });
    this.hooks.onSettled?.(status, groupReason);
    void mean;
    return { dropped: droppedCount };
  }

  // ---------------------------------------------------------------- scheduling

  /** The Windowed FIFO rebuilt from the queue rows (from the head on): any instance gets the same. */
  private async fifo(m: Pick<EntityManager, 'query'>): Promise<{ fifo: WindowedFifo; rows: Map<string, QueueRow>; newest: number | null; state: { adaptive?: WindowedFifoState['adaptive'] } }> {
    const rows: QueueRow[] = await m.query(
      `SELECT "rollout_id", "group_id", "task_id", "position", "status", "reason", "tokens", "version", "difficulty",
              (extract(epoch from "submitted_at") * 1000)::bigint AS submitted_ms, (extract(epoch from "completed_at") * 1000)::bigint AS completed_ms
       FROM "data_pool_queue" WHERE "run_id" = $1
         AND "position" >= coalesce((SELECT min("position") FROM "data_pool_queue" WHERE "run_id" = $1 AND "status" IN ('pending', 'completed')), 9223372036854775807)
       ORDER BY "position"`,
      [this.cfg.runId],
    );
    const [passed]: { p: string | null; newest: string | null }[] = await m.query(
      `SELECT (SELECT max("position") FROM "data_pool_queue" WHERE "run_id" = $1 AND "status" IN ('taken', 'dropped') AND "position" < $2) AS p,
              (SELECT max("position") FROM "data_pool_queue" WHERE "run_id" = $1) AS newest`,
      [this.cfg.runId, rows.length ? rows[0].position : '9223372036854775807'],
    );
    const [sched]: { state: { adaptive?: WindowedFifoState['adaptive'] } }[] = await m.query(`SELECT "state" FROM "data_pool_scheduler" WHERE "run_id" = $1`, [this.cfg.runId]);
    const state = sched?.state ?? {};
    const fifo = WindowedFifo.restore(this.cfg.window, {
      entries: rows.map((r) => ({
        id: r.rollout_id,
        position: Number(r.position),
        submittedAt: Number(r.submitted_ms),
        groupId: r.group_id,
        status: r.status,
        ...(r.difficulty !== null ? { difficulty: r.difficulty } : {}),
        ...(r.status === 'completed' || r.status === 'taken' ? { tokens: r.tokens ?? 0, completedAt: Number(r.completed_ms ?? r.submitted_ms) } : {}),
        ...(r.version !== null ? { version: r.version } : {}),
      })),
      passedPosition: passed?.p === null || passed?.p === undefined ? null : Number(passed.p),
      ...(this.cfg.window.window === 'adaptive' && state.adaptive ? { adaptive: state.adaptive } : {}),
    });
    return { fifo, rows: new Map(rows.map((r) => [r.rollout_id, r])), newest: ms(passed?.newest), state };
  }

  /** Current W (for metrics). */
  get window(): number | null {
    return this.lastWindow;
  }

  /** Takes one batch if the window allows it and cuts it; returns its id or null. */
  async scheduleOnce(now: number): Promise<string | null> {
    const { fifo } = await this.fifo(this.ds);
    this.lastWindow = fifo.window;
    const expired = fifo.expiredHead(now);
    if (expired) {
      await this.ds.query(`UPDATE "data_pool_queue" SET "status" = 'dropped', "reason" = $2 WHERE "rollout_id" = $1 AND "status" = 'pending'`, [
        expired.id,
        `head_age_limit: pending for more than ${this.cfg.window.headAgeLimitMs} ms at the head of the queue`,
      ]);
      this.hooks.onDropped?.('head_age_limit');
    }
    const count = this.cfg.batchTrajectories;
    const taken = fifo.take(
      count !== undefined
        ? { now, maxItems: count, minItems: count, ...(this.cfg.batchTokens ? { maxTokens: this.cfg.batchTokens } : {}) }
        : { now, maxTokens: this.cfg.batchTokens, minTokens: this.cfg.batchTokens },
    );
    if (taken.length === 0) return null;
    return this.cut(
      taken.map((t) => ({ id: t.id, outOfOrder: t.outOfOrder })),
      fifo,
      now,
    );
  }

  private async cut(taken: { id: string; outOfOrder: number }[], fifo: WindowedFifo, now: number): Promise<string | null> {
    let batchId: string | null = null;
    let stats: TrainBatchStats | null = null;
    await this.outbox.transaction(async (m) => {
      const [s]: { owner: string | null; live: boolean; next_step: number; last_trained_ms: string | null; last_batch_ms: string | null; state: Record<string, unknown> }[] = await m.query(
        `SELECT "owner", "lease_until" > now() AS live, "next_step", (extract(epoch from "last_trained_at") * 1000)::bigint AS last_trained_ms,
                (extract(epoch from "last_batch_at") * 1000)::bigint AS last_batch_ms, "state" FROM "data_pool_scheduler" WHERE "run_id" = $1 FOR UPDATE`,
        [this.cfg.runId],
      );
      if (!s || s.owner !== this.cfg.owner || !s.live) throw new NotSchedulerError(`run ${this.cfg.runId}: the scheduler lease is held by ${String(s?.owner)}`);
      const ids = taken.map((t) => t.id);
      const step = s.next_step;
      const id = `${this.cfg.runId}:batch:${step}`;
      const claimed = returned<{ rollout_id: string }>(
        await m.query(`UPDATE "data_pool_queue" SET "status" = 'taken', "batch_id" = $2 WHERE "rollout_id" = ANY($1::varchar[]) AND "status" = 'completed' RETURNING "rollout_id"`, [ids, id]),
      );
      if (claimed.length !== ids.length) throw new NotSchedulerError(`batch ${id}: ${ids.length - claimed.length} of its trajectories were taken meanwhile`);
      const trajs: { id: string; group_id: string; advantage: number; loss_masked: boolean; call_ids: string[]; call_advantages: number[] | null }[] = await m.query(
        `SELECT "id", "group_id", "advantage", "loss_masked", "call_ids", "call_advantages" FROM "trajectories" WHERE "id" = ANY($1::varchar[])`,
        [ids],
      );
      const byId = new Map(trajs.map((t) => [t.id, t]));
      const queue: { rollout_id: string; position: string; difficulty: number | null }[] = await m.query(
        `SELECT "rollout_id", "position", "difficulty" FROM "data_pool_queue" WHERE "rollout_id" = ANY($1::varchar[])`,
        [ids],
      );
      const qOf = new Map(queue.map((q) => [q.rollout_id, q]));
      const segments = await this.calls.segmentsOf(ids, m);
      const b = new PrefixTreeBuilder();
      const samples: { sampleId: string; trajectoryId: string; groupId: string; advantage: number; lossWeight: number }[] = [];
      const outVersions: Uint32Array[] = [];
      let outputTokens = 0;
      for (const t of ids) {
        const tr = byId.get(t);
        if (!tr) throw new Error(`trajectory ${t} is queued as completed but has no trajectories row`);
        for (const c of orderParentsFirst(segments.get(t) ?? [])) {
          const at = tr.call_advantages ? tr.call_ids.indexOf(c.callId) : -1;
          const advantage = at >= 0 && tr.call_advantages ? Number(tr.call_advantages[at]) : Number(tr.advantage);
          const meta = { sampleId: c.callId, trajectoryId: t, groupId: tr.group_id, advantage, lossWeight: tr.loss_masked ? 0 : 1 };
          b.add(c, meta);
          samples.push(meta);
          outVersions.push(c.outputVersions);
          outputTokens += c.outputIds.length;
        }
      }
      const tree = b.build();
      const [pv]: { v: number | null }[] = await m.query(`SELECT max("version") AS v FROM "policy_versions"`);
      let maxSeen = 0;
      for (const v of outVersions) for (let i = 0; i < v.length; i++) if (v[i] > maxSeen) maxSeen = v[i];
      const policyVersion = Math.max(pv?.v ?? 0, maxSeen);
      const blob = await writeTrainBatchBlob(m, { batchId: id, runId: this.cfg.runId, tree });
      // staleness per output token, in versions
      let sum = 0,
        max = 0,
        older = 0,
        n = 0;
      for (const v of outVersions)
        for (let i = 0; i < v.length; i++) {
          const age = Math.max(0, policyVersion - v[i]);
          sum += age;
          if (age > max) max = age;
          if (age > this.cfg.stalenessK) older++;
          n++;
        }
      const [newest]: { p: string | null }[] = await m.query(`SELECT max("position") AS p FROM "data_pool_queue" WHERE "run_id" = $1`, [this.cfg.runId]);
      const lags = ids.map((t) => Number(newest?.p ?? 0) - Number(qOf.get(t)?.position ?? 0));
      const diffs = ids.map((t) => qOf.get(t)?.difficulty).filter((d): d is number => d !== null && d !== undefined);
      const [pop]: { d: number | null }[] = await m.query(`SELECT avg("difficulty") AS d FROM "data_pool_queue" WHERE "run_id" = $1 AND "difficulty" IS NOT NULL`, [this.cfg.runId]);
      const lastTrained = ms(s.last_trained_ms);
      const lastBatch = ms(s.last_batch_ms);
      stats = {
        trajectories: ids.length,
        samples: samples.length,
        groups: new Set(samples.map((x) => x.groupId)).size,
        totalTokens: b.total,
        uniqueTokens: tree.tokens.length,
        outputTokens,
        sharing: b.total > 0 ? Math.max(0, 1 - tree.tokens.length / b.total) : 0,
        staleness: { k: this.cfg.stalenessK, mean: n ? sum / n : 0, max, shareOlderThanK: n ? older / n : 0 },
        positionLag: { mean: lags.reduce((a, x) => a + x, 0) / lags.length, max: Math.max(...lags) },
        outOfOrder: { mean: taken.reduce((a, x) => a + x.outOfOrder, 0) / taken.length, max: Math.max(...taken.map((x) => x.outOfOrder)) },
        difficulty: { batchMean: diffs.length ? diffs.reduce((a, x) => a + x, 0) / diffs.length : null, populationMean: pop?.d === null || pop?.d === undefined ? null : Number(pop.d) },
        lossMasked: trajs.filter((t) => t.loss_masked).length,
        // the trainer waited from its last acknowledgement until this batch existed (0 when a batch was already waiting)
        trainerWaitMs: lastTrained === null ? null : lastBatch === null || lastBatch <= lastTrained ? Math.max(0, now - lastTrained) : 0,
      };
      if (stats.trainerWaitMs !== null && stats.trainerWaitMs > 0) fifo.trainerWaited(stats.trainerWaitMs);
      const createdAt = now;
      const event = createEvent(
        'train_batch.created',
        { batchId: id, step, runId: this.cfg.runId, trajectoryIds: ids, groupIds: [...new Set(samples.map((x) => x.groupId))], samples, blob, stats, policyVersion, createdAt },
        { key: this.cfg.runId, producer: this.cfg.producer, id: `train_batch.created:${id}` },
      );
      await m.query(
        `INSERT INTO "train_batches" ("id", "event_id", "step", "policy_version", "trajectory_ids", "sample_ids", "num_samples", "num_tokens", "created_at") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, to_timestamp($9::float8 / 1000.0))`,
        [id, event.id, step, policyVersion, ids, samples.map((x) => x.sampleId), samples.length, String(b.total), createdAt],
      );
      await m.query(`UPDATE "trajectories" SET "status" = 'scheduled', "train_batch_id" = $2 WHERE "id" = ANY($1::varchar[])`, [ids, id]);
      await m.query(`INSERT INTO "data_pool_batch_stats" ("batch_id", "run_id", "step", "stats", "created_at") VALUES ($1, $2, $3, $4, to_timestamp($5::float8 / 1000.0))`, [
        id,
        this.cfg.runId,
        step,
        JSON.stringify(stats),
        createdAt,
      ]);
      const snap = fifo.snapshot();
      await m.query(`UPDATE "data_pool_scheduler" SET "next_step" = "next_step" + 1, "last_batch_at" = to_timestamp($2::float8 / 1000.0), "state" = $3 WHERE "run_id" = $1`, [
        this.cfg.runId,
        createdAt,
        JSON.stringify({ ...s.state, ...(snap.adaptive ? { adaptive: snap.adaptive } : {}), window: snap.window }),
      ]);
      await this.outbox.enqueue(m, event);
      batchId = id;
    });
    if (batchId && stats) this.hooks.onBatch?.(batchId, stats);
    return batchId;
  }

  /** Batches a reader refused (checksum): their trajectories go back to the queue and are cut again under a new batch id. */
  private async requeueRefused(): Promise<number> {
    const refused: { batch_id: string }[] = await this.ds.query(`SELECT "batch_id" FROM "train_batch_blobs" WHERE "run_id" = $1 AND "refused_at" IS NOT NULL AND "recut_batch_id" IS NULL`, [
      this.cfg.runId,
    ]);
    let n = 0;
    for (const { batch_id } of refused) {
      await this.ds.transaction(async (m) => {
        const back = returned(await m.query(`UPDATE "data_pool_queue" SET "status" = 'completed', "batch_id" = NULL WHERE "batch_id" = $1 AND "status" = 'taken' RETURNING 1`, [batch_id]));
        await m.query(`UPDATE "trajectories" SET "status" = 'ready', "train_batch_id" = NULL WHERE "train_batch_id" = $1`, [batch_id]);
        await m.query(`UPDATE "train_batch_blobs" SET "recut_batch_id" = 'requeued' WHERE "batch_id" = $1`, [batch_id]);
        n += back.length;
      });
      this.hooks.warn?.('train batch refused by its reader; trajectories re-queued', { batchId: batch_id });
    }
    return n;
  }

  // ---------------------------------------------------------------- retention

  /**
   * Prunes what lies behind the run's resume point: the call tokens (llm_calls rows of their
   * trajectories) and the claim-check blobs of trained batches, and takes them out of the batch
   * log (pruned_at). The resume point is the newest FULL checkpoint (weights + AdamW + data
   * position): train_batch.trained `checkpointed` marks the batch after which the trainer wrote
   * one, so a resume starts at the next step and every batch at or before a checkpointed one is
   * no longer needed. A published version alone is not a resume point (the trainer publishes
   * weight-only versions between full checkpoints and, after a crash, trains the batches since
   * its newest full checkpoint again from this log), so weights.published does not prune.
   * Statistics rows (batch stats, trajectories, train_batches) stay.
   */
  async prune(): Promise<{ batches: number; calls: number }> {
    const due: { batch_id: string }[] = await this.ds.query(
      `SELECT s."batch_id" FROM "data_pool_batch_stats" s WHERE s."run_id" = $1 AND s."pruned_at" IS NULL AND s."trained_at" IS NOT NULL
         AND EXISTS (SELECT 1 FROM "data_pool_batch_stats" l WHERE l."run_id" = s."run_id" AND l."step" >= s."step" AND l."checkpointed")`,
      [this.cfg.runId],
    );
    let calls = 0;
    for (const { batch_id } of due) {
      await this.ds.transaction(async (m) => {
        const gone = returned(await m.query(`DELETE FROM "llm_calls" WHERE "rollout_id" IN (SELECT "rollout_id" FROM "data_pool_queue" WHERE "batch_id" = $1) RETURNING 1`, [batch_id]));
        calls += gone.length;
        await m.query(`DELETE FROM "train_batch_blobs" WHERE "batch_id" = $1`, [batch_id]);
        await m.query(`UPDATE "data_pool_batch_stats" SET "pruned_at" = now() WHERE "batch_id" = $1`, [batch_id]);
      });
    }
    return { batches: due.length, calls };
  }

  /** Counts for metrics. */
  async gauges(): Promise<{ groupsWaiting: number; ready: number; pending: number; scheduled: number; dropped: number }> {
    const [g]: { n: string }[] = await this.ds.query(`SELECT count(*) AS n FROM "data_pool_groups" WHERE "run_id" = $1 AND "status" = 'open'`, [this.cfg.runId]);
    const rows: { status: string; n: string }[] = await this.ds.query(`SELECT "status", count(*) AS n FROM "data_pool_queue" WHERE "run_id" = $1 GROUP BY "status"`, [this.cfg.runId]);
    const by = Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
    return { groupsWaiting: Number(g.n), ready: by.completed ?? 0, pending: by.pending ?? 0, scheduled: by.taken ?? 0, dropped: by.dropped ?? 0 };
  }
}
