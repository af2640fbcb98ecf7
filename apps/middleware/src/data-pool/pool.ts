import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import { createEvent, ROLLOUT_FINISH_REASONS, type TrainBatchStats } from '@anvil/contracts';
import {
  filterConfig,
  FilterInputError,
  WindowedFifo,
  type AdvantageConfig,
  type FilterConfig,
  type WindowConfig,
  type WindowedFifoState,
} from '@anvil/rl';
import type { Outbox } from '@anvil/persistence';
import { PrefixTreeBuilder, writeTrainBatchBlob } from '@anvil/train-batch';
import { CallStore, orderParentsFirst } from './call-store';
import { GroupSettlement } from './group-settlement';

export interface DataPoolConfig {
  /** One scheduler, one queue and one step counter per run. */
  runId: string;
  /** Event producer name (and the outbox's). */
  producer: string;
  /** This instance's name in the scheduler lease. */
  owner: string;
  advantage: AdvantageConfig;
  /**
   * libs/rl's group filters, applied when a group settles: compact filtering (compactReasons:
   * kept for statistics, loss weight 0), environment failures (envErrorReasons: dropped, sent
   * back for retry while attempts <= maxEnvRetries), aborted rollouts (dropReasons: dropped),
   * over-long outputs (a call stopped at max tokens: masked when maskTruncated, else kept) and
   * the zero-variance drop (dropZeroVariance). Every rollout finish reason must be in one list.
   */
  filters: FilterConfig;
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

/** What callers pass: any field, the filters as a partial FilterConfig (libs/rl's defaults fill the rest). */
export type DataPoolConfigInput = Partial<Omit<DataPoolConfig, 'filters'>> & { filters?: Partial<FilterConfig> };

export function dataPoolConfig(input: DataPoolConfigInput = {}): DataPoolConfig {
  const problems: string[] = [];
  let filters: FilterConfig;
  try {
    filters = filterConfig(input.filters ?? {});
  } catch (err) {
    if (!(err instanceof FilterInputError)) throw err;
    problems.push(`filters.${err.message}`);
    filters = filterConfig();
  }
  // a finish reason in no list would make filterGroup throw at settle time: refuse it at start
  const listed = new Set([...filters.okReasons, ...filters.compactReasons, ...filters.envErrorReasons, ...filters.dropReasons]);
  const unlisted = ROLLOUT_FINISH_REASONS.filter((r) => !listed.has(r));
  if (unlisted.length)
    problems.push(`filters: finish reason(s) ${unlisted.join(', ')} in none of okReasons, compactReasons, envErrorReasons, dropReasons`);
  const c: DataPoolConfig = {
    runId: 'default',
    producer: 'data-pool',
    owner: `data-pool-${randomUUID().slice(0, 8)}`,
    advantage: { estimator: 'grpo' },
    window: { inFlight: 8 },
    stalenessK: 2,
    callWaitMs: 30_000,
    groupTimeoutMs: 30 * 60_000,
    leaseMs: 10_000,
    ...input,
    filters,
  };
  if (c.batchTrajectories === undefined && c.batchTokens === undefined) c.batchTrajectories = 4;
  if (c.batchTrajectories !== undefined && !(Number.isInteger(c.batchTrajectories) && c.batchTrajectories > 0))
    problems.push(`batchTrajectories: must be a positive integer, got ${c.batchTrajectories}`);
  if (c.batchTokens !== undefined && !(Number.isInteger(c.batchTokens) && c.batchTokens > 0))
    problems.push(`batchTokens: must be a positive integer, got ${c.batchTokens}`);
  for (const k of ['callWaitMs', 'groupTimeoutMs', 'leaseMs', 'stalenessK'] as const)
    if (!(Number.isFinite(c[k]) && c[k] >= 0)) problems.push(`${k}: must be a non-negative number, got ${c[k]}`);
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

/**
 * How many unconsumed (pending or completed) queue entries one Windowed-FIFO take can look at, from
 * the head: the scan moves the head on only over entries it picks (at most the batch's trajectory
 * count) and stops W entries (W <= N = inFlight, also for an adaptive window at its widest) past the
 * first entry it cannot pick. Entries beyond, and the taken or dropped ones between them, change
 * nothing in this round's take; later rounds reach them as the head moves. (A straggler behind that
 * many completed entries is checked against the head age limit once it is within reach, which is
 * when the window starts waiting on it.) Null in token-budget mode: a batch has no item bound.
 */
export function fifoReach(cfg: Pick<DataPoolConfig, 'batchTrajectories' | 'window'>): number | null {
  return cfg.batchTrajectories === undefined ? null : cfg.batchTrajectories + cfg.window.inFlight;
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
  private readonly settlement: GroupSettlement;
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
    this.settlement = new GroupSettlement(ds, outbox, cfg, { onSettled: hooks.onSettled, onDropped: hooks.onDropped });
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
    await this.ds.query(`UPDATE "data_pool_scheduler" SET "owner" = NULL, "lease_until" = NULL WHERE "run_id" = $1 AND "owner" = $2`, [
      this.cfg.runId,
      this.cfg.owner,
    ]);
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
    const settled = await this.settlement.settleGroups(now);
    result.settledGroups = settled.groups;
    result.droppedRollouts = settled.dropped;
    for (let i = 0; i < 64; i++) {
      const id = await this.scheduleOnce(Date.now());
      if (!id) break;
      result.batches.push(id);
    }
    return result;
  }

  // ---------------------------------------------------------------- scheduling

  /** The Windowed FIFO rebuilt from the queue rows (from the head on): any instance gets the same. */
  private async fifo(m: Pick<EntityManager, 'query'>): Promise<{
    fifo: WindowedFifo;
    rows: Map<string, QueueRow>;
    newest: number | null;
    state: { adaptive?: WindowedFifoState['adaptive'] };
    trainerWaitingSince: number | null;
  }> {
    // From the head to the end of what one take can reach (fifoReach): a run that queues a whole pass
    // of tasks ahead keeps thousands of pending rows, and reading them all every round cost more than
    // the round itself (125 ms a round at 3,200 queued rows on PGlite, 23 ms at 100).
    const reach = fifoReach(this.cfg);
    const rows: QueueRow[] = await m.query(
      `SELECT "rollout_id", "group_id", "task_id", "position", "status", "reason", "tokens", "version", "difficulty",
              (extract(epoch from "submitted_at") * 1000)::bigint AS submitted_ms, (extract(epoch from "completed_at") * 1000)::bigint AS completed_ms
       FROM "data_pool_queue" WHERE "run_id" = $1
         AND "position" >= coalesce((SELECT min("position") FROM "data_pool_queue" WHERE "run_id" = $1 AND "status" IN ('pending', 'completed')), 9223372036854775807)
         AND "position" < coalesce((SELECT "position" FROM "data_pool_queue" WHERE "run_id" = $1 AND "status" IN ('pending', 'completed') AND $2::integer IS NOT NULL
                                    ORDER BY "position" OFFSET $2::integer LIMIT 1), 9223372036854775807)
       ORDER BY "position"`,
      [this.cfg.runId, reach],
    );
    const [passed]: { p: string | null; newest: string | null }[] = await m.query(
      `SELECT (SELECT max("position") FROM "data_pool_queue" WHERE "run_id" = $1 AND "status" IN ('taken', 'dropped') AND "position" < $2) AS p,
              (SELECT max("position") FROM "data_pool_queue" WHERE "run_id" = $1) AS newest`,
      [this.cfg.runId, rows.length ? rows[0].position : '9223372036854775807'],
    );
    const [sched]: { state: { adaptive?: WindowedFifoState['adaptive'] }; last_trained_ms: string | null; last_batch_ms: string | null }[] =
      await m.query(
        `SELECT "state", (extract(epoch from "last_trained_at") * 1000)::bigint AS last_trained_ms, (extract(epoch from "last_batch_at") * 1000)::bigint AS last_batch_ms
       FROM "data_pool_scheduler" WHERE "run_id" = $1`,
        [this.cfg.runId],
      );
    const state = sched?.state ?? {};
    // The trainer waits from its last acknowledgement when no batch it has not acknowledged exists.
    const lastTrained = ms(sched?.last_trained_ms ?? null);
    const lastBatch = ms(sched?.last_batch_ms ?? null);
    const trainerWaitingSince = lastTrained !== null && (lastBatch === null || lastBatch <= lastTrained) ? lastTrained : null;
    const fifo = WindowedFifo.restore(this.cfg.window, {
      entries: rows.map((r) => ({
        id: r.rollout_id,
        position: Number(r.position),
        submittedAt: Number(r.submitted_ms),
        groupId: r.group_id,
        status: r.status,
        ...(r.difficulty !== null ? { difficulty: r.difficulty } : {}),
        ...(r.status === 'completed' || r.status === 'taken'
          ? { tokens: r.tokens ?? 0, completedAt: Number(r.completed_ms ?? r.submitted_ms) }
          : {}),
        ...(r.version !== null ? { version: r.version } : {}),
      })),
      passedPosition: passed?.p === null || passed?.p === undefined ? null : Number(passed.p),
      ...(this.cfg.window.window === 'adaptive' && state.adaptive ? { adaptive: state.adaptive } : {}),
    });
    return { fifo, rows: new Map(rows.map((r) => [r.rollout_id, r])), newest: ms(passed?.newest), state, trainerWaitingSince };
  }

  /** Current W (for metrics). */
  get window(): number | null {
    return this.lastWindow;
  }

  /** Takes one batch if the window allows it and cuts it; returns its id or null. */
  async scheduleOnce(now: number): Promise<string | null> {
    const { fifo, trainerWaitingSince } = await this.fifo(this.ds);
    // Adaptive W widens while the trainer waits, so it must hear of the wait before the take that
    // ends it (as libs/rl's scheduler bench reports it). The FIFO is rebuilt from the rows each
    // round with the state of the last take, whose wait is 0: the whole wait so far goes in.
    // (Until 2026-12-05 the pool reported a wait only after the batch that ended it was cut, so the
    // window widened one batch late: finished groups sat behind a straggling head while the trainer idled.)
    if (trainerWaitingSince !== null && now > trainerWaitingSince) fifo.trainerWaited(now - trainerWaitingSince);
    this.lastWindow = fifo.window;
    const expired = fifo.expiredHead(now);
    if (expired) {
      await this.ds.query(
        `UPDATE "data_pool_queue" SET "status" = 'dropped', "reason" = $2 WHERE "rollout_id" = $1 AND "status" = 'pending'`,
        [expired.id, `head_age_limit: pending for more than ${this.cfg.window.headAgeLimitMs} ms at the head of the queue`],
      );
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
      const [s]: {
        owner: string | null;
        live: boolean;
        next_step: number;
        last_trained_ms: string | null;
        last_batch_ms: string | null;
        state: Record<string, unknown>;
      }[] = await m.query(
        `SELECT "owner", "lease_until" > now() AS live, "next_step", (extract(epoch from "last_trained_at") * 1000)::bigint AS last_trained_ms,
                (extract(epoch from "last_batch_at") * 1000)::bigint AS last_batch_ms, "state" FROM "data_pool_scheduler" WHERE "run_id" = $1 FOR UPDATE`,
        [this.cfg.runId],
      );
      if (!s || s.owner !== this.cfg.owner || !s.live)
        throw new NotSchedulerError(`run ${this.cfg.runId}: the scheduler lease is held by ${String(s?.owner)}`);
      const ids = taken.map((t) => t.id);
      const step = s.next_step;
      const id = `${this.cfg.runId}:batch:${step}`;
      const claimed = returned<{ rollout_id: string }>(
        await m.query(
          `UPDATE "data_pool_queue" SET "status" = 'taken', "batch_id" = $2 WHERE "rollout_id" = ANY($1::varchar[]) AND "status" = 'completed' RETURNING "rollout_id"`,
          [ids, id],
        ),
      );
      if (claimed.length !== ids.length)
        throw new NotSchedulerError(`batch ${id}: ${ids.length - claimed.length} of its trajectories were taken meanwhile`);
      const trajs: {
        id: string;
        group_id: string;
        advantage: number;
        loss_masked: boolean;
        call_ids: string[];
        call_advantages: number[] | null;
      }[] = await m.query(
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
      const [newest]: { p: string | null }[] = await m.query(`SELECT max("position") AS p FROM "data_pool_queue" WHERE "run_id" = $1`, [
        this.cfg.runId,
      ]);
      const lags = ids.map((t) => Number(newest?.p ?? 0) - Number(qOf.get(t)?.position ?? 0));
      const diffs = ids.map((t) => qOf.get(t)?.difficulty).filter((d): d is number => d !== null && d !== undefined);
      const [pop]: { d: number | null }[] = await m.query(
        `SELECT avg("difficulty") AS d FROM "data_pool_queue" WHERE "run_id" = $1 AND "difficulty" IS NOT NULL`,
        [this.cfg.runId],
      );
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
        difficulty: {
          batchMean: diffs.length ? diffs.reduce((a, x) => a + x, 0) / diffs.length : null,
          populationMean: pop?.d === null || pop?.d === undefined ? null : Number(pop.d),
        },
        lossMasked: trajs.filter((t) => t.loss_masked).length,
        // the trainer waited from its last acknowledgement until this batch existed (0 when a batch was already waiting)
        trainerWaitMs: lastTrained === null ? null : lastBatch === null || lastBatch <= lastTrained ? Math.max(0, now - lastTrained) : 0,
      };
      const createdAt = now;
      const event = createEvent(
        'train_batch.created',
        {
          batchId: id,
          step,
          runId: this.cfg.runId,
          trajectoryIds: ids,
          groupIds: [...new Set(samples.map((x) => x.groupId))],
          samples,
          blob,
          stats,
          policyVersion,
          createdAt,
        },
        { key: this.cfg.runId, producer: this.cfg.producer, id: `train_batch.created:${id}` },
      );
      await m.query(
        `INSERT INTO "train_batches" ("id", "event_id", "step", "policy_version", "trajectory_ids", "sample_ids", "num_samples", "num_tokens", "created_at") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, to_timestamp($9::float8 / 1000.0))`,
        [id, event.id, step, policyVersion, ids, samples.map((x) => x.sampleId), samples.length, String(b.total), createdAt],
      );
      await m.query(`UPDATE "trajectories" SET "status" = 'scheduled', "train_batch_id" = $2 WHERE "id" = ANY($1::varchar[])`, [ids, id]);
      await m.query(
        `INSERT INTO "data_pool_batch_stats" ("batch_id", "run_id", "step", "stats", "created_at") VALUES ($1, $2, $3, $4, to_timestamp($5::float8 / 1000.0))`,
        [id, this.cfg.runId, step, JSON.stringify(stats), createdAt],
      );
      const snap = fifo.snapshot();
      await m.query(
        `UPDATE "data_pool_scheduler" SET "next_step" = "next_step" + 1, "last_batch_at" = to_timestamp($2::float8 / 1000.0), "state" = $3 WHERE "run_id" = $1`,
        [
          this.cfg.runId,
          createdAt,
          JSON.stringify({ ...s.state, ...(snap.adaptive ? { adaptive: snap.adaptive } : {}), window: snap.window }),
        ],
      );
      await this.outbox.enqueue(m, event);
      batchId = id;
    });
    if (batchId && stats) this.hooks.onBatch?.(batchId, stats);
    return batchId;
  }

  /** Batches a reader refused (checksum): their trajectories go back to the queue and are cut again under a new batch id. */
  private async requeueRefused(): Promise<number> {
    const refused: { batch_id: string }[] = await this.ds.query(
      `SELECT "batch_id" FROM "train_batch_blobs" WHERE "run_id" = $1 AND "refused_at" IS NOT NULL AND "recut_batch_id" IS NULL`,
      [this.cfg.runId],
    );
    let n = 0;
    for (const { batch_id } of refused) {
      await this.ds.transaction(async (m) => {
        const back = returned(
          await m.query(
            `UPDATE "data_pool_queue" SET "status" = 'completed', "batch_id" = NULL WHERE "batch_id" = $1 AND "status" = 'taken' RETURNING 1`,
            [batch_id],
          ),
        );
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
        const gone = returned(
          await m.query(
            `DELETE FROM "llm_calls" WHERE "rollout_id" IN (SELECT "rollout_id" FROM "data_pool_queue" WHERE "batch_id" = $1) RETURNING 1`,
            [batch_id],
          ),
        );
        calls += gone.length;
        await m.query(`DELETE FROM "train_batch_blobs" WHERE "batch_id" = $1`, [batch_id]);
        await m.query(`UPDATE "data_pool_batch_stats" SET "pruned_at" = now() WHERE "batch_id" = $1`, [batch_id]);
      });
    }
    return { batches: due.length, calls };
  }

  /** Counts for metrics. */
  async gauges(): Promise<{ groupsWaiting: number; ready: number; pending: number; scheduled: number; dropped: number }> {
    const [g]: { n: string }[] = await this.ds.query(
      `SELECT count(*) AS n FROM "data_pool_groups" WHERE "run_id" = $1 AND "status" = 'open'`,
      [this.cfg.runId],
    );
    const rows: { status: string; n: string }[] = await this.ds.query(
      `SELECT "status", count(*) AS n FROM "data_pool_queue" WHERE "run_id" = $1 GROUP BY "status"`,
      [this.cfg.runId],
    );
    const by = Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
    return {
      groupsWaiting: Number(g.n),
      ready: by.completed ?? 0,
      pending: by.pending ?? 0,
      scheduled: by.taken ?? 0,
      dropped: by.dropped ?? 0,
    };
  }
}
