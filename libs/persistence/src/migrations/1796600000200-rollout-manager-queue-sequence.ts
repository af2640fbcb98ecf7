import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Queue positions (rollout.started.queuePosition) from one sequence, so several rollout-manager
 * instances (or a restarted one) sharing a database never hand out the same position and keep
 * submission order across restarts; and rm_groups.manager, the instance a group belongs to
 * (its consumer group name), so a restarting instance recovers its own groups only.
 */
export class RolloutManagerQueueSequence1796600000200 implements MigrationInterface {
  name = 'RolloutManagerQueueSequence1796600000200';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`CREATE SEQUENCE "rm_queue_position_seq" AS bigint MINVALUE 0 START WITH 0`);
    await queryRunner.query(
      `SELECT setval('rm_queue_position_seq', COALESCE((SELECT MAX("queue_position") + 1 FROM "rm_rollouts"), 0), false)`,
    );
    await queryRunner.query(`ALTER TABLE "rm_groups" ADD "manager" character varying(256) NOT NULL DEFAULT ''`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE "rm_groups" DROP COLUMN "manager"`);
    await queryRunner.query(`DROP SEQUENCE "rm_queue_position_seq"`);
  }
}
