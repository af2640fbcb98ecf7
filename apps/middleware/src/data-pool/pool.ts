import type { DataSource } from 'typeorm';
import type { TrainBatchStats } from '@anvil/contracts';
import type { Outbox } from '@anvil/persistence';
import { CallStore } from './call-store';
import type { DataPoolConfig } from './config';
import { pruneTrained } from './retention';
import { BatchCut } from './scheduling/batch-cut';
import { readFifo } from './scheduling/fifo-view';
import { requeueRefused } from './scheduling/refused-batches';
import { SchedulerLease } from './scheduling/scheduler-lease';
import { GroupSettlement } from './settlement/group-settlement';

export interface TickResult {
  active: boolean;
  settledGroups: number;
  droppedRollouts: number;
  batches: string[];
  requeued: number;
}

export interface DataPoolHooks {
  onBatch?: (id: string, stats: TrainBatchStats) => void;
  onSettled?: (status: 'ready' | 'dropped', reason: string | null) => void;
  onDropped?: (reason: string) => void;
  warn?: (msg: string, fields: Record<string, unknown>) => void;
}

/** Batches cut in one round at most, so a round that finds a long backlog still ends (the next round goes on). */
const MAX_BATCHES_PER_ROUND = 64;

/**
 * The Data Pool's decisions, all from database state so any instance can take over:
 * settling groups (advantages, filters), the Windowed-FIFO schedule and the batch cut
 * (claim-check blob + train_batch.created through the outbox, one transaction, fenced by the
 * run's scheduler row). One round runs at a time per instance.
 */
export class DataPool {
  readonly calls: CallStore;
  private readonly lease: SchedulerLease;
  private readonly settlement: GroupSettlement;
  private readonly batches: BatchCut;
  private lastWindow: number | null = null;
  private round: Promise<void> = Promise.resolve();

  constructor(
    private readonly ds: DataSource,
    outbox: Outbox,
    readonly cfg: DataPoolConfig,
    private readonly hooks: DataPoolHooks = {},
  ) {
    this.calls = new CallStore(ds);
    this.lease = new SchedulerLease(ds, cfg);
    this.settlement = new GroupSettlement(ds, outbox, cfg, { onSettled: hooks.onSettled, onDropped: hooks.onDropped });
    this.batches = new BatchCut(outbox, cfg, this.calls, this.lease);
  }

  /** Takes or renews the run's scheduler lease; true when this instance is the active scheduler. */
  acquireLease(): Promise<boolean> {
    return this.lease.acquire();
  }

  /** Gives the lease up (graceful stop): another instance takes over at once. */
  releaseLease(): Promise<void> {
    return this.lease.release();
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

  private async tickOnce(now: number): Promise<TickResult> {
    const result: TickResult = { active: false, settledGroups: 0, droppedRollouts: 0, batches: [], requeued: 0 };
    if (!(await this.lease.acquire())) return result;
    result.active = true;
    result.requeued = await requeueRefused(this.ds, this.cfg.runId, this.hooks.warn);
    const settled = await this.settlement.settleGroups(now);
    result.settledGroups = settled.groups;
    result.droppedRollouts = settled.dropped;
    for (let i = 0; i < MAX_BATCHES_PER_ROUND; i++) {
      const id = await this.scheduleOnce(Date.now());
      if (!id) break;
      result.batches.push(id);
    }
    return result;
  }

  /** Current W (for metrics). */
  get window(): number | null {
    return this.lastWindow;
  }

  /** Takes one batch if the window allows it and cuts it; returns its id or null. */
  async scheduleOnce(now: number): Promise<string | null> {
    const { fifo, trainerWaitingSince } = await readFifo(this.ds, this.cfg);
    // Adaptive W widens while the trainer waits, so it must hear of the wait before the take that
    // ends it (as libs/rl's scheduler bench reports it): told only after the batch that ends it, the
    // window would widen one batch late, and finished groups would sit behind a straggling head
    // while the trainer idles. The FIFO is rebuilt from the rows each round with the state of the
    // last take, whose wait is 0: the whole wait so far goes in.
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
    const batch = await this.batches.cut(
      taken.map((t) => ({ id: t.id, outOfOrder: t.outOfOrder })),
      fifo,
      now,
    );
    this.hooks.onBatch?.(batch.id, batch.stats);
    return batch.id;
  }

  /** Prunes the call tokens and blobs of batches behind the run's resume point (see pruneTrained). */
  prune(): Promise<{ batches: number; calls: number }> {
    return pruneTrained(this.ds, this.cfg.runId);
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
