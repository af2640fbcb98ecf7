import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The gateway's transactional outbox: no call is answered before its record is durable. The
 * statement that reserves a call's turn and stores its capture row also stores its
 * llm_call.recorded event here, so the call is answered as soon as that one statement commits; the event is published to Kafka afterwards and its row
 * deleted. Rows left behind by a gateway that died between the two (or whose broker was down)
 * are published by any gateway's sweeper once they are `staleAfter` old.
 *  - `frame`: the event as the bus stores it (ANV1), with `turnIndex` relative to the request's
 *    first turn; `turn_index` is the absolute turn the statement reserved (set into the event
 *    when a sweeper publishes it).
 *  - `prompt_from_capture`: the frame's prompt ids are left out (and its reusedPromptTokens is
 *    0, kept in `reused_prompt_tokens`) because the call's gateway_calls row, written by the
 *    same statement, holds them as a delta of its parent. Storing every call's whole prompt
 *    here would make a long session write the square of its length to the WAL, which the
 *    delta capture rows exist to avoid; a sweeper rebuilds the prompt from the capture chain.
 *  - Rows live seconds, so `frame` is stored uncompressed (STORAGE EXTERNAL): compressing
 *    token arrays costs PostgreSQL CPU for bytes that are deleted moments later.
 * Raw SQL only (apps/gateway/src/capture): no TypeORM entity, so the schema builder ignores it.
 */
export class GatewayOutbox1796300000000 implements MigrationInterface {
  name = 'GatewayOutbox1796300000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`CREATE TABLE "gateway_outbox" (
      "event_id" character varying(128) NOT NULL,
      "session_id" character varying(128) NOT NULL,
      "turn_index" integer NOT NULL,
      "frame" bytea NOT NULL,
      "prompt_from_capture" boolean NOT NULL DEFAULT false,
      "reused_prompt_tokens" integer NOT NULL DEFAULT 0,
      "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
      CONSTRAINT "pk_gateway_outbox" PRIMARY KEY ("event_id"))`);
    await queryRunner.query(`ALTER TABLE "gateway_outbox" ALTER COLUMN "frame" SET STORAGE EXTERNAL`);
    await queryRunner.query(`CREATE INDEX "idx_gateway_outbox_created" ON "gateway_outbox" ("created_at")`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const [{ n }]: { n: string }[] = await queryRunner.query(`SELECT count(*) AS "n" FROM "gateway_outbox"`);
    // Unpublished records would be lost with the table: refuse rather than drop them silently.
    if (Number(n) > 0)
      throw new Error(
        `gateway_outbox still holds ${n} unpublished llm_call.recorded events: start a gateway to publish them before reverting`,
      );
    await queryRunner.query(`DROP TABLE "gateway_outbox"`);
  }
}
