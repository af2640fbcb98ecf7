import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The process group of a rollout's black-box agent (rm_rollouts.agent_pgid), so a manager that
 * restarts after a crash kills the agents its predecessor left running (they run in their own
 * process groups and would otherwise outlive it).
 */
export class RolloutManagerAgentPid1796600000100 implements MigrationInterface {
  name = 'RolloutManagerAgentPid1796600000100';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE "rm_rollouts" ADD "agent_pgid" integer`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE "rm_rollouts" DROP COLUMN "agent_pgid"`);
  }
}
