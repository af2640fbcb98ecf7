import type { DataSource } from 'typeorm';
import { allDone, Coalescer } from './coalescer';

export type GroupStatus = 'queued' | 'running' | 'finished' | 'trained' | 'dropped';
export type RolloutRowStatus = 'queued' | 'running' | 'completed';

export interface GroupRow {
  id: string;
  taskId: string;
  taskSetId: string;
  groupSize: number;
  purpose: 'train' | 'eval';
  evalId: string | null;
  status: GroupStatus;
  startVersion: number | null;
}

export interface RolloutRow {
  id: string;
  groupId: string;
  taskId: string;
  sampleIndex: number;
  queuePosition: number;
  status: RolloutRowStatus;
  sessionId: string | null;
  policyVersionAtStart: number | null;
  attempts: number;
}

/**
 * The manager's durable state (migration 1796600000000-rollout-manager-state), raw SQL. The
 * per-rollout writes of many rollouts at once (session opened, running, completed) go out as one
 * statement per tick each: written one by one, hundreds of rollouts starting together queued
 * behind each other on the connection pool.
 */
export class RolloutStateStore {
  private readonly sessionWrites = new Coalescer<{ id: string; sessionId: string }, void>(async (rows) => {
    await this.ds.query(
      `UPDATE "rm_rollouts" r SET "session_id" = v."sid", "updated_at" = now() FROM unnest($1::varchar[], $2::varchar[]) AS v("id", "sid") WHERE r."id" = v."id"`,
      [rows.map((x) => x.id), rows.map((x) => x.sessionId)],
    );
    return allDone(rows);
  });
  private readonly runningWrites = new Coalescer<{ id: string; sessionId: string; version: number; attempts: number }, void>(
    async (rows) => {
      await this.ds.query(
        `UPDATE "rm_rollouts" r SET "status" = 'running', "session_id" = v."sid", "policy_version_at_start" = v."ver", "attempts" = v."att", "updated_at" = now()
       FROM unnest($1::varchar[], $2::varchar[], $3::int[], $4::int[]) AS v("id", "sid", "ver", "att") WHERE r."id" = v."id"`,
        [rows.map((x) => x.id), rows.map((x) => x.sessionId), rows.map((x) => x.version), rows.map((x) => x.attempts)],
      );
      return allDone(rows);
    },
  );
  private readonly completedWrites = new Coalescer<{ id: string; finishReason: string }, void>(async (rows) => {
    await this.ds.query(
      `UPDATE "rm_rollouts" r SET "status" = 'completed', "finish_reason" = v."fr", "updated_at" = now() FROM unnest($1::varchar[], $2::varchar[]) AS v("id", "fr") WHERE r."id" = v."id"`,
      [rows.map((x) => x.id), rows.map((x) => x.finishReason)],
    );
    return allDone(rows);
  });

  /** `manager`: this instance's identity (its consumer group); groups are recovered by the instance that created them. */
  constructor(
    private readonly ds: DataSource,
    private readonly manager: string,
  ) {}

  /** `count` queue positions in increasing order, from the shared sequence (unique across instances and restarts). */
  async queuePositions(count: number): Promise<number[]> {
    if (count === 0) return [];
    const rows = (await this.ds.query(`SELECT nextval('rm_queue_position_seq') AS "n" FROM generate_series(1, $1::int)`, [count])) as {
      n: string | number;
    }[];
    return rows.map((r) => Number(r.n)).sort((a, b) => a - b);
  }

  /** Groups and their rollouts in one transaction (a statement per table). */
  async insertGroups(all: { group: GroupRow; rollouts: RolloutRow[] }[]): Promise<void> {
    if (all.length === 0) return;
    const gs = all.map((a) => a.group);
    await this.ds.transaction(async (m) => {
      await m.query(
        `INSERT INTO "rm_groups" ("id","task_id","task_set_id","group_size","purpose","eval_id","status","start_version","manager")
         SELECT v.*, $9::varchar FROM unnest($1::varchar[], $2::varchar[], $3::varchar[], $4::int[], $5::varchar[], $6::varchar[], $7::varchar[], $8::int[]) AS v
         ON CONFLICT ("id") DO NOTHING`,
        [
          gs.map((g) => g.id),
          gs.map((g) => g.taskId),
          gs.map((g) => g.taskSetId),
          gs.map((g) => g.groupSize),
          gs.map((g) => g.purpose),
          gs.map((g) => g.evalId),
          gs.map((g) => g.status),
          gs.map((g) => g.startVersion),
          this.manager,
        ],
      );
      await this.insertRollouts(
        all.flatMap((a) => a.rollouts),
        m,
      );
    });
  }

  async insertRollouts(rollouts: RolloutRow[], m: { query: DataSource['query'] } = this.ds): Promise<void> {
    if (rollouts.length === 0) return;
    await m.query(
      `INSERT INTO "rm_rollouts" ("id","group_id","task_id","sample_index","queue_position","status")
       SELECT v.*, 'queued' FROM unnest($1::varchar[], $2::varchar[], $3::varchar[], $4::int[], $5::bigint[]) AS v
       ON CONFLICT ("id") DO NOTHING`,
      [
        rollouts.map((r) => r.id),
        rollouts.map((r) => r.groupId),
        rollouts.map((r) => r.taskId),
        rollouts.map((r) => r.sampleIndex),
        rollouts.map((r) => r.queuePosition),
      ],
    );
  }

  async setGroup(id: string, status: GroupStatus, startVersion?: number): Promise<void> {
    if (startVersion === undefined)
      await this.ds.query(`UPDATE "rm_groups" SET "status" = $2, "updated_at" = now() WHERE "id" = $1`, [id, status]);
    else
      await this.ds.query(`UPDATE "rm_groups" SET "status" = $2, "start_version" = $3, "updated_at" = now() WHERE "id" = $1`, [
        id,
        status,
        startVersion,
      ]);
  }

  /** The rollout's session is open: its id is recorded before any agent gets the key, so a restart can close it. */
  sessionOpened(id: string, sessionId: string): Promise<void> {
    return this.sessionWrites.push({ id, sessionId });
  }

  /** Forgets a session a restart closed before any call was recorded in it (the rollout runs again with a new one). */
  async clearSession(id: string): Promise<void> {
    await this.ds.query(`UPDATE "rm_rollouts" SET "session_id" = NULL, "updated_at" = now() WHERE "id" = $1`, [id]);
  }

  rolloutRunning(id: string, sessionId: string, version: number, attempts: number): Promise<void> {
    return this.runningWrites.push({ id, sessionId, version, attempts });
  }

  rolloutCompleted(id: string, finishReason: string): Promise<void> {
    return this.completedWrites.push({ id, finishReason });
  }

  async evaluationKnown(evalId: string): Promise<boolean> {
    const rows = (await this.ds.query(`SELECT 1 FROM "rm_groups" WHERE "eval_id" = $1 LIMIT 1`, [evalId])) as unknown[];
    return rows.length > 0;
  }

  async openGroups(): Promise<GroupRow[]> {
    const rows = (await this.ds.query(
      `SELECT "id","task_id","task_set_id","group_size","purpose","eval_id","status","start_version" FROM "rm_groups" WHERE "status" IN ('queued','running','finished') AND "manager" = $1 ORDER BY "created_at", "id"`,
      [this.manager],
    )) as Record<string, unknown>[];
    return rows.map((r) => ({
      id: String(r.id),
      taskId: String(r.task_id),
      taskSetId: String(r.task_set_id),
      groupSize: Number(r.group_size),
      purpose: r.purpose === 'eval' ? 'eval' : 'train',
      evalId: r.eval_id === null ? null : String(r.eval_id),
      status: r.status as GroupStatus,
      startVersion: r.start_version === null ? null : Number(r.start_version),
    }));
  }

  async rolloutsOfGroups(groupIds: string[]): Promise<RolloutRow[]> {
    if (groupIds.length === 0) return [];
    const rows = (await this.ds.query(
      `SELECT "id","group_id","task_id","sample_index","queue_position","status","session_id","policy_version_at_start","attempts" FROM "rm_rollouts" WHERE "group_id" = ANY($1) ORDER BY "queue_position"`,
      [groupIds],
    )) as Record<string, unknown>[];
    return rows.map((r) => ({
      id: String(r.id),
      groupId: String(r.group_id),
      taskId: String(r.task_id),
      sampleIndex: Number(r.sample_index),
      queuePosition: Number(r.queue_position),
      status: r.status as RolloutRowStatus,
      sessionId: r.session_id === null ? null : String(r.session_id),
      policyVersionAtStart: r.policy_version_at_start === null ? null : Number(r.policy_version_at_start),
      attempts: Number(r.attempts),
    }));
  }
}
