import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * A session's call limits and their state, kept on its gateway_sessions row so that every gateway
 * instance behind the load balancer counts against the same numbers (each call updates them in one
 * statement): the budget (max_calls, calls_admitted), the rate limit as a token bucket
 * (calls_per_second, call_burst, rate_tokens as of rate_at) and the calls each refused. NULL
 * limits (every session before this column) mean none.
 */
export class GatewaySessionCallLimits1797000000500 implements MigrationInterface {
  name = 'GatewaySessionCallLimits1797000000500';

  async up(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE "gateway_sessions"
      ADD "max_calls" integer,
      ADD "calls_per_second" double precision,
      ADD "call_burst" integer,
      ADD "calls_admitted" integer NOT NULL DEFAULT 0,
      ADD "rate_tokens" double precision,
      ADD "rate_at" TIMESTAMP WITH TIME ZONE,
      ADD "refused_budget" integer NOT NULL DEFAULT 0,
      ADD "refused_rate" integer NOT NULL DEFAULT 0`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`ALTER TABLE "gateway_sessions"
      DROP COLUMN "refused_rate", DROP COLUMN "refused_budget", DROP COLUMN "rate_at", DROP COLUMN "rate_tokens",
      DROP COLUMN "calls_admitted", DROP COLUMN "call_burst", DROP COLUMN "calls_per_second", DROP COLUMN "max_calls"`);
  }
}
