import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The generic transactional outbox (libs/persistence/src/outbox): a service that changes state
 * and announces it (the trainer's weights.published, the Data Pool's trajectory.ready,
 * train_batch.created, rollout_group.settled) writes the event here in the same transaction as
 * the change; the relay publishes it after the commit and deletes the row, and a sweeper
 * publishes rows a crashed process left behind. So an event is published if and only if its
 * state change committed (at least once; consumers are idempotent by event id).
 *  - `seq`: commit order for the sweeper (a transaction's events in enqueue order; events of a
 *    later transaction after those of an earlier one).
 *  - `frame`: the event as the bus stores it (ANV1). Rows live seconds: stored uncompressed.
 *  - `producer`: the outbox's name (one table shared by every service of the database); each
 *    sweeper publishes only its own producer's rows.
 * Raw SQL only: no TypeORM entity, so the schema builder ignores it.
 */
export class EventOutbox1796400000000 implements MigrationInterface {
  name = 'EventOutbox1796400000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`CREATE TABLE "event_outbox" (
      "seq" bigserial NOT NULL,
      "event_id" character varying(128) NOT NULL,
      "producer" character varying(128) NOT NULL,
      "frame" bytea NOT NULL,
      "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
      CONSTRAINT "pk_event_outbox" PRIMARY KEY ("seq"),
      CONSTRAINT "uq_event_outbox_event" UNIQUE ("event_id"))`);
    await queryRunner.query(`ALTER TABLE "event_outbox" ALTER COLUMN "frame" SET STORAGE EXTERNAL`);
    await queryRunner.query(`CREATE INDEX "idx_event_outbox_producer_seq" ON "event_outbox" ("producer", "seq")`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const [{ n }]: { n: string }[] = await queryRunner.query(`SELECT count(*) AS "n" FROM "event_outbox"`);
    // Unpublished events would be lost with the table: refuse rather than drop them silently.
    if (Number(n) > 0)
      throw new Error(`event_outbox still holds ${n} unpublished events: start their services to publish them before reverting`);
    await queryRunner.query(`DROP TABLE "event_outbox"`);
  }
}
