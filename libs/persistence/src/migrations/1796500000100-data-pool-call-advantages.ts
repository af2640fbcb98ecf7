import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Per-call advantages of a trajectory (aligned with "call_ids"), set when the Data Pool combines
 * per-call process rewards with the outcome reward (libs/rl's process-reward rule); NULL means
 * every call of the trajectory takes the trajectory's "advantage".
 */
export class DataPoolCallAdvantages1796500000100 implements MigrationInterface {
  name = 'DataPoolCallAdvantages1796500000100';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE "trajectories" ADD "call_advantages" double precision[]`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE "trajectories" DROP COLUMN "call_advantages"`);
  }
}
