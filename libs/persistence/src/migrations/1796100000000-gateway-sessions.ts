import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The gateway's state: sessions (key hash, ids, status, expiry, start policy version), the
 * capture state of answered calls (what a later call needs to extend one token-exactly, found
 * by fingerprint) and the current policy version per deployment (staleness gating). Written
 * by hand from the entities; a test asserts TypeORM sees no drift.
 */
export class GatewaySessions1796100000000 implements MigrationInterface {
  name = 'GatewaySessions1796100000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const statements = [
      `CREATE TABLE "gateway_sessions" (
        "id" character varying(128) NOT NULL,
        "key_hash" character varying(64) NOT NULL,
        "rollout_id" character varying(128) NOT NULL,
        "group_id" character varying(128) NOT NULL,
        "task_id" character varying(128) NOT NULL,
        "model" text NOT NULL,
        "max_context_tokens" integer,
        "status" character varying(16) NOT NULL,
        "expires_at" TIMESTAMP WITH TIME ZONE,
        "policy_version_at_start" integer,
        "call_count" integer NOT NULL DEFAULT 0,
        "branch_count" integer NOT NULL DEFAULT 0,
        "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        "closed_at" TIMESTAMP WITH TIME ZONE,
        "close_reason" character varying(32),
        CONSTRAINT "pk_gateway_sessions" PRIMARY KEY ("id"))`,
      `CREATE INDEX "idx_gateway_sessions_status" ON "gateway_sessions" ("status")`,
      `CREATE INDEX "idx_gateway_sessions_rollout" ON "gateway_sessions" ("rollout_id")`,

      `CREATE TABLE "gateway_calls" (
        "id" character varying(128) NOT NULL,
        "session_id" character varying(128) NOT NULL,
        "branch_id" character varying(128) NOT NULL,
        "parent_call_id" character varying(128),
        "turn_index" integer NOT NULL,
        "reply_fingerprint" character varying(64) NOT NULL,
        "messages_json" text NOT NULL,
        "assistant_message_json" text NOT NULL,
        "tools_json" text,
        "template_extra_json" text NOT NULL,
        "prompt_ids" bytea NOT NULL,
        "output_ids" bytea NOT NULL,
        "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "pk_gateway_calls" PRIMARY KEY ("id"))`,
      `CREATE INDEX "idx_gateway_calls_session_fingerprint" ON "gateway_calls" ("session_id", "reply_fingerprint")`,

      `CREATE TABLE "gateway_policy_state" (
        "deployment" character varying(128) NOT NULL,
        "version" integer NOT NULL,
        "updated_at" TIMESTAMP WITH TIME ZONE NOT NULL,
        CONSTRAINT "pk_gateway_policy_state" PRIMARY KEY ("deployment"))`,
    ];
    for (const sql of statements) await queryRunner.query(sql);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    for (const table of ['gateway_policy_state', 'gateway_calls', 'gateway_sessions']) await queryRunner.query(`DROP TABLE "${table}"`);
  }
}
