import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The rollout manager's own durable state, so a restarted manager knows what it
 * had queued, what was running (to close its sessions and end it as aborted, once) and how
 * much staleness capacity is held (StalenessController.restore):
 *  - rm_groups: one row per rollout group; status queued → running → finished → trained|dropped.
 *  - rm_rollouts: one row per rollout; status queued → running → completed, with its session
 *    and the ids of the rollout.started / rollout.completed events it published (deterministic,
 *    so a republish after a crash is deduplicated by event id downstream).
 *  - queue_position: submission order (rollout.started.queuePosition).
 * Raw SQL only (apps/rollout-manager/src/state): no TypeORM entity.
 */
export class RolloutManagerState1796600000000 implements MigrationInterface {
  name = 'RolloutManagerState1796600000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`CREATE TABLE "rm_groups" (
      "id" character varying(128) NOT NULL,
      "task_id" character varying(128) NOT NULL,
      "task_set_id" character varying(128) NOT NULL,
      "group_size" integer NOT NULL,
      "purpose" character varying(8) NOT NULL,
      "eval_id" character varying(128),
      "status" character varying(16) NOT NULL,
      "start_version" integer,
      "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
      "updated_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
      CONSTRAINT "pk_rm_groups" PRIMARY KEY ("id"))`);
    await queryRunner.query(`CREATE INDEX "idx_rm_groups_status" ON "rm_groups" ("status")`);
    await queryRunner.query(`CREATE TABLE "rm_rollouts" (
      "id" character varying(128) NOT NULL,
      "group_id" character varying(128) NOT NULL,
      "task_id" character varying(128) NOT NULL,
      "sample_index" integer NOT NULL,
      "queue_position" bigint NOT NULL,
      "status" character varying(16) NOT NULL,
      "session_id" character varying(128),
      "policy_version_at_start" integer,
      "finish_reason" character varying(32),
      "attempts" integer NOT NULL DEFAULT 0,
      "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
      "updated_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
      CONSTRAINT "pk_rm_rollouts" PRIMARY KEY ("id"),
      CONSTRAINT "fk_rm_rollouts_group" FOREIGN KEY ("group_id") REFERENCES "rm_groups"("id") ON DELETE CASCADE)`);
    await queryRunner.query(`CREATE INDEX "idx_rm_rollouts_status" ON "rm_rollouts" ("status")`);
    await queryRunner.query(`CREATE UNIQUE INDEX "uq_rm_rollouts_position" ON "rm_rollouts" ("queue_position")`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE "rm_rollouts"`);
    await queryRunner.query(`DROP TABLE "rm_groups"`);
  }
}
