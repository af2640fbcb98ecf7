import type { DataSource } from 'typeorm';

/**
 * The current policy version, shared by every gateway instance through PostgreSQL: whichever
 * instance consumes a policy_version.activated writes it here, and admissions read it here.
 * The current version is the newest any deployment activated.
 */
export class PolicyVersionStore {
  constructor(
    private readonly ds: DataSource,
    private readonly initialVersion: number,
  ) {}

  /** Raises the deployment's version (never lowers it: redeliveries and reordering are harmless). */
  async recordActivation(deployment: string, version: number, at: Date): Promise<void> {
    await this.ds.query(
      `INSERT INTO "gateway_policy_state" ("deployment", "version", "updated_at") VALUES ($1, $2, $3)
       ON CONFLICT ("deployment") DO UPDATE SET "version" = GREATEST("gateway_policy_state"."version", EXCLUDED."version"),
         "updated_at" = CASE WHEN EXCLUDED."version" > "gateway_policy_state"."version" THEN EXCLUDED."updated_at" ELSE "gateway_policy_state"."updated_at" END`,
      [deployment, version, at],
    );
  }

  async current(): Promise<number> {
    const rows: { v: number | null }[] = await this.ds.query(`SELECT max("version") AS "v" FROM "gateway_policy_state"`);
    return this.versionOf(rows[0]?.v);
  }

  /** The current version given max("version") of gateway_policy_state (null before any activation), for callers that read it in their own statement. */
  versionOf(maxStored: number | string | null | undefined): number {
    return maxStored === null || maxStored === undefined ? this.initialVersion : Math.max(Number(maxStored), this.initialVersion);
  }
}
