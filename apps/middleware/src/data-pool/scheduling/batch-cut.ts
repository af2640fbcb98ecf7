import { createEvent, type EventEnvelope, type TrainBatchStats } from '@anvil/contracts';
import type { Outbox } from '@anvil/persistence';
import type { WindowedFifo } from '@anvil/rl';
import { PrefixTreeBuilder, writeTrainBatchBlob } from '@anvil/train-batch';
import { orderParentsFirst, type CallStore } from '../call-store';
import type { DataPoolConfig } from '../config';
import { returned, type Db } from '../sql';
import { recordBatch } from './batch-log';
import { batchStats } from './batch-stats';
import { NotSchedulerError, type LockedScheduler, type SchedulerLease } from './scheduler-lease';

/** A trajectory the Windowed FIFO took, and how far out of order. */
export interface TakenTrajectory {
  id: string;
  outOfOrder: number;
}

interface TrajectoryRow {
  id: string;
  group_id: string;
  advantage: number;
  loss_masked: boolean;
  call_ids: string[];
  call_advantages: number[] | null;
}

interface QueueRow {
  rollout_id: string;
  position: string;
  difficulty: number | null;
}

type Sample = EventEnvelope<'train_batch.created'>['payload']['samples'][number];

/** The batch's prefix tree and what its statistics need from the samples. */
interface BuiltTree {
  builder: PrefixTreeBuilder;
  tree: ReturnType<PrefixTreeBuilder['build']>;
  samples: Sample[];
  outputVersions: Uint32Array[];
  outputTokens: number;
}

/**
 * Cuts one batch from the trajectories the Windowed FIFO took, in one transaction fenced by the
 * run's scheduler row: the claim-check blob, the batch log and scheduled marks, the batch
 * statistics, the scheduler's next step and window state, and train_batch.created through the
 * outbox. Throws NotSchedulerError (nothing written) when the lease moved or a pick was taken
 * meanwhile.
 */
export class BatchCut {
  constructor(
    private readonly outbox: Outbox,
    private readonly cfg: DataPoolConfig,
    private readonly calls: CallStore,
    private readonly lease: SchedulerLease,
  ) {}

  async cut(taken: TakenTrajectory[], fifo: WindowedFifo, now: number): Promise<{ id: string; stats: TrainBatchStats }> {
    let cut = null as { id: string; stats: TrainBatchStats } | null;
    await this.outbox.transaction(async (m) => {
      const scheduler = await this.lease.fence(m);
      const step = scheduler.nextStep;
      const id = `${this.cfg.runId}:batch:${step}`;
      const ids = taken.map((t) => t.id);
      await this.claim(m, ids, id);
      const trajectories = await this.trajectoriesOf(m, ids);
      const queued = await this.queueRowsOf(m, ids);
      const built = await this.buildTree(m, ids, trajectories);
      const policyVersion = await this.policyVersionOf(m, built.outputVersions);
      const blob = await writeTrainBatchBlob(m, { batchId: id, runId: this.cfg.runId, tree: built.tree });
      const stats = await this.statsOf(m, { taken, trajectories, queued, built, scheduler, policyVersion, now });
      const createdAt = now;
      const event = this.announcement({ id, step, ids, built, blob, stats, policyVersion, createdAt });
      await recordBatch(m, {
        batchId: id,
        eventId: event.id,
        step,
        policyVersion,
        trajectoryIds: ids,
        sampleIds: built.samples.map((x) => x.sampleId),
        totalTokens: built.builder.total,
        createdAt,
      });
      await this.recordStats(m, id, step, stats, createdAt);
      await this.advanceScheduler(m, scheduler, fifo, createdAt);
      await this.outbox.enqueue(m, event);
      cut = { id, stats };
    });
    if (!cut) throw new Error('batch cut: the transaction committed without a batch');
    return cut;
  }

  /** The batch statistics, from what the cut gathered and two reads of the run's queue. */
  private async statsOf(
    m: Db,
    c: {
      taken: TakenTrajectory[];
      trajectories: Map<string, TrajectoryRow>;
      queued: Map<string, QueueRow>;
      built: BuiltTree;
      scheduler: LockedScheduler;
      policyVersion: number;
      now: number;
    },
  ): Promise<TrainBatchStats> {
    const ids = c.taken.map((t) => t.id);
    const newestPosition = await this.newestPosition(m);
    const populationDifficulty = await this.populationDifficulty(m);
    return batchStats({
      trajectoryIds: ids,
      samples: c.built.samples,
      totalTokens: c.built.builder.total,
      uniqueTokens: c.built.tree.tokens.length,
      outputTokens: c.built.outputTokens,
      outputVersions: c.built.outputVersions,
      policyVersion: c.policyVersion,
      stalenessK: this.cfg.stalenessK,
      positions: ids.map((t) => Number(c.queued.get(t)?.position ?? 0)),
      newestPosition,
      outOfOrder: c.taken.map((t) => t.outOfOrder),
      difficulties: ids.map((t) => c.queued.get(t)?.difficulty).filter((d): d is number => d !== null && d !== undefined),
      populationDifficulty,
      lossMasked: [...c.trajectories.values()].filter((t) => t.loss_masked).length,
      lastTrainedMs: c.scheduler.lastTrainedMs,
      lastBatchMs: c.scheduler.lastBatchMs,
      now: c.now,
    });
  }

  /** train_batch.created v2: the claim-check (blob), the samples' metadata and the statistics; its id is derived from the batch id. */
  private announcement(b: {
    id: string;
    step: number;
    ids: string[];
    built: BuiltTree;
    blob: EventEnvelope<'train_batch.created'>['payload']['blob'];
    stats: TrainBatchStats;
    policyVersion: number;
    createdAt: number;
  }): EventEnvelope<'train_batch.created'> {
    return createEvent(
      'train_batch.created',
      {
        batchId: b.id,
        step: b.step,
        runId: this.cfg.runId,
        trajectoryIds: b.ids,
        groupIds: [...new Set(b.built.samples.map((x) => x.groupId))],
        samples: b.built.samples,
        blob: b.blob,
        stats: b.stats,
        policyVersion: b.policyVersion,
        createdAt: b.createdAt,
      },
      { key: this.cfg.runId, producer: this.cfg.producer, id: `train_batch.created:${b.id}` },
    );
  }

  /** Takes the picked queue rows for the batch; all of them must still be completed (another cut took none). */
  private async claim(m: Db, ids: string[], batchId: string): Promise<void> {
    const claimed = returned<{ rollout_id: string }>(
      await m.query(
        `UPDATE "data_pool_queue" SET "status" = 'taken', "batch_id" = $2 WHERE "rollout_id" = ANY($1::varchar[]) AND "status" = 'completed' RETURNING "rollout_id"`,
        [ids, batchId],
      ),
    );
    if (claimed.length !== ids.length)
      throw new NotSchedulerError(`batch ${batchId}: ${ids.length - claimed.length} of its trajectories were taken meanwhile`);
  }

  private async trajectoriesOf(m: Db, ids: string[]): Promise<Map<string, TrajectoryRow>> {
    const rows: TrajectoryRow[] = await m.query(
      `SELECT "id", "group_id", "advantage", "loss_masked", "call_ids", "call_advantages" FROM "trajectories" WHERE "id" = ANY($1::varchar[])`,
      [ids],
    );
    return new Map(rows.map((t) => [t.id, t]));
  }

  private async queueRowsOf(m: Db, ids: string[]): Promise<Map<string, QueueRow>> {
    const rows: QueueRow[] = await m.query(
      `SELECT "rollout_id", "position", "difficulty" FROM "data_pool_queue" WHERE "rollout_id" = ANY($1::varchar[])`,
      [ids],
    );
    return new Map(rows.map((q) => [q.rollout_id, q]));
  }

  /**
   * Merges the trajectories' calls into one prefix tree, parents before children, in pick order.
   * A call takes its per-call advantage when its trajectory has them, else its trajectory's; a
   * masked trajectory's calls carry loss weight 0.
   */
  private async buildTree(m: Db, ids: string[], trajectories: Map<string, TrajectoryRow>): Promise<BuiltTree> {
    const segments = await this.calls.segmentsOf(ids, m);
    const builder = new PrefixTreeBuilder();
    const samples: Sample[] = [];
    const outputVersions: Uint32Array[] = [];
    let outputTokens = 0;
    for (const t of ids) {
      const tr = trajectories.get(t);
      if (!tr) throw new Error(`trajectory ${t} is queued as completed but has no trajectories row`);
      for (const c of orderParentsFirst(segments.get(t) ?? [])) {
        const at = tr.call_advantages ? tr.call_ids.indexOf(c.callId) : -1;
        const advantage = at >= 0 && tr.call_advantages ? Number(tr.call_advantages[at]) : Number(tr.advantage);
        const meta = { sampleId: c.callId, trajectoryId: t, groupId: tr.group_id, advantage, lossWeight: tr.loss_masked ? 0 : 1 };
        builder.add(c, meta);
        samples.push(meta);
        outputVersions.push(c.outputVersions);
        outputTokens += c.outputIds.length;
      }
    }
    return { builder, tree: builder.build(), samples, outputVersions, outputTokens };
  }

  /** The batch's policy version: the newest published one, or the newest its tokens were sampled with if that is newer. */
  private async policyVersionOf(m: Db, outputVersions: Uint32Array[]): Promise<number> {
    const [pv]: { v: number | null }[] = await m.query(`SELECT max("version") AS v FROM "policy_versions"`);
    let maxSeen = 0;
    for (const v of outputVersions) for (let i = 0; i < v.length; i++) if (v[i] > maxSeen) maxSeen = v[i];
    return Math.max(pv?.v ?? 0, maxSeen);
  }

  private async newestPosition(m: Db): Promise<number> {
    const [newest]: { p: string | null }[] = await m.query(`SELECT max("position") AS p FROM "data_pool_queue" WHERE "run_id" = $1`, [
      this.cfg.runId,
    ]);
    return Number(newest?.p ?? 0);
  }

  private async populationDifficulty(m: Db): Promise<number | null> {
    const [pop]: { d: number | null }[] = await m.query(
      `SELECT avg("difficulty") AS d FROM "data_pool_queue" WHERE "run_id" = $1 AND "difficulty" IS NOT NULL`,
      [this.cfg.runId],
    );
    return pop?.d === null || pop?.d === undefined ? null : Number(pop.d);
  }

  private async recordStats(m: Db, batchId: string, step: number, stats: TrainBatchStats, createdAt: number): Promise<void> {
    await m.query(
      `INSERT INTO "data_pool_batch_stats" ("batch_id", "run_id", "step", "stats", "created_at") VALUES ($1, $2, $3, $4, to_timestamp($5::float8 / 1000.0))`,
      [batchId, this.cfg.runId, step, JSON.stringify(stats), createdAt],
    );
  }

  /** The next step number, when the last batch was cut (the trainer's wait is measured from it) and the window's state. */
  private async advanceScheduler(m: Db, scheduler: LockedScheduler, fifo: WindowedFifo, createdAt: number): Promise<void> {
    const snap = fifo.snapshot();
    await m.query(
      `UPDATE "data_pool_scheduler" SET "next_step" = "next_step" + 1, "last_batch_at" = to_timestamp($2::float8 / 1000.0), "state" = $3 WHERE "run_id" = $1`,
      [
        this.cfg.runId,
        createdAt,
        JSON.stringify({ ...scheduler.state, ...(snap.adaptive ? { adaptive: snap.adaptive } : {}), window: snap.window }),
      ],
    );
  }
}
