import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * data_pool_queue.settled_at: when the Data Pool settled the rollout (published its trajectory,
 * masked it or dropped it). A group settles in waves: an environment failure sent back for
 * retry comes back as a new rollout of the same group and sample index, which reopens the
 * group; the next settlement handles only the rows not settled yet, while the rewards of the
 * ones already settled stay in the group's statistics. Rows that have left 'pending' are
 * settled; a group that holds a pending row but is no longer open (a retry that arrived before
 * this column existed and was never picked up) is reopened.
 */
export class DataPoolSettledAt1796700000000 implements MigrationInterface {
  name = 'DataPoolSettledAt1796700000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE "data_pool_queue" ADD "settled_at" TIMESTAMP WITH TIME ZONE`);
    await q.query(`UPDATE "data_pool_queue" SET "settled_at" = now() WHERE "status" <> 'pending'`);
    await q.query(
      `UPDATE "data_pool_groups" g SET "status" = 'open' WHERE g."status" <> 'open' AND EXISTS (SELECT 1 FROM "data_pool_queue" q WHERE q."group_id" = g."group_id" AND q."settled_at" IS NULL)`,
    );
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE "data_pool_queue" DROP COLUMN "settled_at"`);
  }
}
