import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The Responses API's stored responses (`store`, `previous_response_id`, `GET /v1/responses/{id}`),
 * kept with the rest of the gateway's session state so that any gateway instance can continue a
 * conversation another one answered.
 *  - `conversation_json`: the messages (the call service's chat form) this response added to its
 *    previous response's conversation: the request's new input items, then the reply exactly as
 *    it was recorded. A follow-up's history is the chain's conversations in order, so a session
 *    stores each message once, however long its chain grows.
 *  - `response_json`: the response object as it was answered.
 * Rows never change. Raw SQL only (apps/gateway/src/responses): no TypeORM entity.
 */
export class GatewayResponses1796900000000 implements MigrationInterface {
  name = 'GatewayResponses1796900000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`CREATE TABLE "gateway_responses" (
      "id" character varying(64) NOT NULL,
      "session_id" character varying(128) NOT NULL,
      "previous_response_id" character varying(64),
      "call_id" character varying(128),
      "conversation_json" text NOT NULL,
      "response_json" text NOT NULL,
      "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
      CONSTRAINT "pk_gateway_responses" PRIMARY KEY ("id"))`);
    await queryRunner.query(`CREATE INDEX "idx_gateway_responses_session" ON "gateway_responses" ("session_id")`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE "gateway_responses"`);
  }
}
