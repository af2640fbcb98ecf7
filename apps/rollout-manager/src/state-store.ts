import type { DataSource } from 'typeorm';

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
  agentPgid?: number | null;
}

/** The manager's durable state (migration 1796600000000-rollout-manager-state), raw SQL. */
export class RolloutStateStore {
  /** `manager`: this instance's identity (its consumer group); groups are recovered by the instance that created them. */
  constructor(
    private readonly ds: DataSource,
    private readonly manager: string,
  ) {}

  /** `count` queue positions in increasing order, from the shared sequence (unique across instances and restarts). */
  async queuePositions(count: number): Promise<number[]> {
    if (count === 0) return [];
    const rows = (await this.ds.query(`SELECT nextval('rm_queue_position_seq') AS "n" FROM generate_series(1, $1::int)`, [count])) as { n: string | number }[];
    return rows.map((r) => Number(r.n)).sort((a, b) => a - b);
  }

  async insertGroup(g: GroupRow, rollouts: RolloutRow[]): Promise<void> {
    await this.ds.transaction(async (m) => {
      await m.query(
        `INSERT INTO "rm_groups" ("id","task_id","task_set_id","group_size","purpose","eval_id","status","start_version","manager") VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9) ON CONFLICT ("id") DO NOTHING`,
        [g.id, g.taskId, g.taskSetId, g.groupSize, g.purpose, g.evalId, g.status, g.startVersion, this.manager],
      );
      await this.insertRollouts(rollouts, m);
    });
  }

  async insertRollouts(rollouts: RolloutRow[], m: { query: DataSource['query'] } = this.ds): Promise<void> {
    for (const r of rollouts) {
      await m.query(`INSERT INTO "rm_rollouts" ("id","group_id","task_id","sample_index","queue_position","status") VALUES ($1,$2,$3,$4,$5,'queued') ON CONFLICT ("id") DO NOTHING`, [
        r.id,
        r.groupId,
        r.taskId,
        r.sampleIndex,
        r.queuePosition,
      ]);
    }
  }

  async setGroup(id: string, status: GroupStatus, startVersion?: number): Promise<void> {
    if (startVersion === undefined) await this.ds.query(`UPDATE "rm_groups" SET "status" = $2, "updated_at" = now() WHERE "id" = $1`, [id, status]);
    else await this.ds.query(`UPDATE "rm_groups" SET "status" = $2, "start_version" = $3, "updated_at" = now() WHERE "id" = $1`, [id, status, startVersion]);
  }

  async rolloutRunning(id: string, sessionId: string, version: number, attempts: number): Promise<void> {
    await this.ds.query(`UPDATE "rm_rollouts" SET "status" = 'running', "session_id" = $2, "policy_version_at_start" = $3, "attempts" = $4, "updated_at" = now() WHERE "id" = $1`, [
      id,
      sessionId,
      version,
      attempts,
    ]);
  }

  async setAgentPgid(id: string, pgid: number): Promise<void> {
    await this.ds.query(`UPDATE "rm_rollouts" SET "agent_pgid" = $2 WHERE "id" = $1`, [id, pgid]);
  }

  async rolloutCompleted(id: string, finishReason: string): Promise<void> {
    await this.ds.query(`UPDATE "rm_rollouts" SET "status" = 'completed', "finish_reason" = $2, "updated_at" = now() WHERE "id" = $1`, [id, finishReason]);
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
      `SELECT "id","group_id","task_id","sample_index","queue_position","status","session_id","policy_version_at_start","attempts","agent_pgid" FROM "rm_rollouts" WHERE "group_id" = ANY($1) ORDER BY "queue_position"`,
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
      agentPgid: r.agent_pgid === null || r.agent_pgid === undefined ? null : Number(r.agent_pgid),
    }));
  }
}
