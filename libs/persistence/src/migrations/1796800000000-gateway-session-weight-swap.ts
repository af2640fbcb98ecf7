import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * gateway_sessions.weight_swap: what a weight update does to the session's running generations
 * ('finish' | 'abort-and-resume', WEIGHT_SWAP_CHOICES in @anvil/contracts), chosen per task set
 * by the rollout manager when it opens the session; the gateway forwards it on every generate
 * request. NULL: the inference-proxy's own policy (every session before this column).
 */
export class GatewaySessionWeightSwap1796800000000 implements MigrationInterface {
  name = 'GatewaySessionWeightSwap1796800000000';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE "gateway_sessions" ADD "weight_swap" character varying(16)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE "gateway_sessions" DROP COLUMN "weight_swap"`);
  }
}
