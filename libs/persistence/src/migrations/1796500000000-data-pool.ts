import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The Data Pool's tables (storage linear in unique tokens): trajectories, groups, Windowed-FIFO batches.
 *  - llm_calls.prompt_prefix_tokens: leading prompt ids NOT stored in the row: they are the
 *    parent call's prompt + output ids (`prompt_ids` holds the rest, `prompt_tokens` the full
 *    length). 0 = the row is whole, which every existing row is, so no data changes.
 *  - train_batch_blobs: a batch's prefix tree in layout 'anvil-prefix-tree/1' (a safetensors
 *    file, libs/contracts/schemas/layouts), read by batch id (claim-check of train_batch.created
 *    v2); refused_at / refused_reason: a reader found a checksum mismatch, the Data Pool re-cuts.
 *  - data_pool_queue: one row per training rollout: its queue position (rollout.started
 *    queuePosition, else arrival order), state in the Windowed FIFO
 *    (pending | completed | taken | dropped), why, and the batch that took it.
 *  - data_pool_groups: a rollout group until it is settled (ready | dropped, with the reason).
 *  - data_pool_scheduler: one row per run: the lease of the one active scheduler (owner,
 *    lease_until; every batch cut locks this row FOR UPDATE and checks the owner: no batch cut
 *    twice, on PostgreSQL and PGlite alike), the next step, adaptive-W state.
 *  - data_pool_batch_stats: per-batch statistics, kept when a run's tokens are pruned.
 * Raw SQL only (apps/middleware/src/data-pool): no TypeORM entities except the llm_calls column.
 */
export class DataPool1796500000000 implements MigrationInterface {
  name = 'DataPool1796500000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE "llm_calls" ADD "prompt_prefix_tokens" integer NOT NULL DEFAULT 0`);
    await q.query(`CREATE TABLE "train_batch_blobs" (
      "batch_id" character varying(128) NOT NULL,
      "run_id" character varying(128),
      "layout" character varying(64) NOT NULL,
      "sha256" character(64) NOT NULL,
      "bytes" integer NOT NULL,
      "nodes" integer NOT NULL,
      "blob" bytea NOT NULL,
      "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
      "refused_at" TIMESTAMP WITH TIME ZONE,
      "refused_reason" text,
      "recut_batch_id" character varying(128),
      CONSTRAINT "pk_train_batch_blobs" PRIMARY KEY ("batch_id"))`);
    await q.query(`ALTER TABLE "train_batch_blobs" ALTER COLUMN "blob" SET STORAGE EXTERNAL`);
    await q.query(`CREATE TABLE "data_pool_queue" (
      "rollout_id" character varying(128) NOT NULL,
      "run_id" character varying(128) NOT NULL,
      "group_id" character varying(128) NOT NULL,
      "task_id" character varying(128) NOT NULL,
      "position" bigint NOT NULL,
      "difficulty" double precision,
      "status" character varying(16) NOT NULL DEFAULT 'pending',
      "reason" text,
      "tokens" integer,
      "version" integer,
      "trajectory_id" character varying(128),
      "batch_id" character varying(128),
      "submitted_at" TIMESTAMP WITH TIME ZONE NOT NULL,
      "completed_at" TIMESTAMP WITH TIME ZONE,
      "calls_wait_reason" text,
      CONSTRAINT "pk_data_pool_queue" PRIMARY KEY ("rollout_id"))`);
    await q.query(`CREATE UNIQUE INDEX "uq_data_pool_queue_position" ON "data_pool_queue" ("run_id", "position")`);
    await q.query(`CREATE INDEX "idx_data_pool_queue_status" ON "data_pool_queue" ("run_id", "status", "position")`);
    await q.query(`CREATE INDEX "idx_data_pool_queue_group" ON "data_pool_queue" ("group_id")`);
    await q.query(`CREATE INDEX "idx_data_pool_queue_batch" ON "data_pool_queue" ("batch_id")`);
    await q.query(`CREATE TABLE "data_pool_groups" (
      "group_id" character varying(128) NOT NULL,
      "run_id" character varying(128) NOT NULL,
      "task_id" character varying(128) NOT NULL,
      "group_size" integer NOT NULL,
      "status" character varying(16) NOT NULL DEFAULT 'open',
      "reason" text,
      "opened_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
      "settled_at" TIMESTAMP WITH TIME ZONE,
      CONSTRAINT "pk_data_pool_groups" PRIMARY KEY ("group_id"))`);
    await q.query(`CREATE INDEX "idx_data_pool_groups_open" ON "data_pool_groups" ("run_id", "status", "opened_at")`);
    await q.query(`CREATE TABLE "data_pool_scheduler" (
      "run_id" character varying(128) NOT NULL,
      "owner" character varying(128),
      "lease_until" TIMESTAMP WITH TIME ZONE,
      "next_step" integer NOT NULL DEFAULT 0,
      "next_position" bigint NOT NULL DEFAULT 0,
      "state" jsonb NOT NULL DEFAULT '{}',
      "last_batch_at" TIMESTAMP WITH TIME ZONE,
      "last_trained_at" TIMESTAMP WITH TIME ZONE,
      CONSTRAINT "pk_data_pool_scheduler" PRIMARY KEY ("run_id"))`);
    await q.query(`CREATE TABLE "data_pool_batch_stats" (
      "batch_id" character varying(128) NOT NULL,
      "run_id" character varying(128) NOT NULL,
      "step" integer NOT NULL,
      "stats" jsonb NOT NULL,
      "created_at" TIMESTAMP WITH TIME ZONE NOT NULL,
      "trained_at" TIMESTAMP WITH TIME ZONE,
      "trained_version" integer,
      "checkpointed" boolean NOT NULL DEFAULT false,
      "pruned_at" TIMESTAMP WITH TIME ZONE,
      CONSTRAINT "pk_data_pool_batch_stats" PRIMARY KEY ("batch_id"))`);
    await q.query(`CREATE UNIQUE INDEX "uq_data_pool_batch_stats_step" ON "data_pool_batch_stats" ("run_id", "step")`);
  }

  async down(q: QueryRunner): Promise<void> {
    for (const t of ['data_pool_batch_stats', 'data_pool_scheduler', 'data_pool_groups', 'data_pool_queue', 'train_batch_blobs'])
      await q.query(`DROP TABLE "${t}"`);
    // The previous code reads every llm_calls row as whole: rebuild delta rows first (parents before children).
    interface Row {
      id: string;
      parent_call_id: string | null;
      prompt_prefix_tokens: number;
      prompt_ids: Buffer;
      output_ids: Buffer;
    }
    const seqs = new Map<string, Buffer>();
    const load = async (id: string): Promise<Buffer> => {
      const known = seqs.get(id);
      if (known) return known;
      const [r]: Row[] = await q.query(
        `SELECT "id", "parent_call_id", "prompt_prefix_tokens", "prompt_ids", "output_ids" FROM "llm_calls" WHERE "id" = $1`,
        [id],
      );
      if (!r) throw new Error(`llm_calls ${id} is missing: a delta row's parent cannot be rebuilt`);
      let prompt = Buffer.from(r.prompt_ids);
      if (r.prompt_prefix_tokens > 0 && r.parent_call_id) {
        const parent = await load(r.parent_call_id);
        prompt = Buffer.concat([parent.subarray(0, r.prompt_prefix_tokens * 4), prompt]);
        await q.query(`UPDATE "llm_calls" SET "prompt_ids" = $2, "prompt_prefix_tokens" = 0 WHERE "id" = $1`, [id, prompt]);
      }
      const seq = Buffer.concat([prompt, Buffer.from(r.output_ids)]);
      seqs.set(id, seq);
      return seq;
    };
    const deltas: { id: string }[] = await q.query(
      `SELECT "id" FROM "llm_calls" WHERE "prompt_prefix_tokens" > 0 ORDER BY "rollout_id", "turn_index"`,
    );
    for (const { id } of deltas) await load(id);
    await q.query(`ALTER TABLE "llm_calls" DROP COLUMN "prompt_prefix_tokens"`);
  }
}
