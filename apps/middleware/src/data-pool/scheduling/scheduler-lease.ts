import type { DataSource } from 'typeorm';
import type { DataPoolConfig } from '../config';
import { returned, type Db } from '../sql';

/** Another instance holds the run's scheduler lease (or took it over meanwhile): nothing was cut. */
export class NotSchedulerError extends Error {
  override name = 'NotSchedulerError';
}

/** The run's scheduler row as a batch cut reads it under its lock. */
export interface LockedScheduler {
  nextStep: number;
  lastTrainedMs: string | null;
  lastBatchMs: string | null;
  state: Record<string, unknown>;
}

/**
 * The run's scheduler lease: the row of data_pool_scheduler for the run (owner, lease_until).
 * Only its holder settles groups and cuts batches; every cut locks the row and checks the lease
 * again (fence), so no batch is cut twice even when the lease changes hands mid-round.
 */
export class SchedulerLease {
  constructor(
    private readonly ds: DataSource,
    private readonly cfg: Pick<DataPoolConfig, 'runId' | 'owner' | 'leaseMs'>,
  ) {}

  /** Takes or renews the lease; true when this instance is the active scheduler. */
  async acquire(): Promise<boolean> {
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
  async release(): Promise<void> {
    await this.ds.query(`UPDATE "data_pool_scheduler" SET "owner" = NULL, "lease_until" = NULL WHERE "run_id" = $1 AND "owner" = $2`, [
      this.cfg.runId,
      this.cfg.owner,
    ]);
  }

  /**
   * Locks the run's scheduler row until the transaction ends and checks this instance still holds
   * a live lease; throws NotSchedulerError otherwise. Returns what the cut numbers and dates from.
   */
  async fence(m: Db): Promise<LockedScheduler> {
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
    return { nextStep: s.next_step, lastTrainedMs: s.last_trained_ms, lastBatchMs: s.last_batch_ms, state: s.state };
  }
}
