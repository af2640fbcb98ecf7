import { MigrationExecutor, type DataSource, type QueryRunner } from 'typeorm';

/**
 * Session advisory lock key serialising migrations: several services may start at once
 * against one server, and TypeORM itself does not lock. ('anvil' as a 40-bit number.)
 */
const MIGRATION_LOCK_KEY = '418464785516';

async function withMigrationLock<T>(ds: DataSource, work: (queryRunner: QueryRunner) => Promise<T>): Promise<T> {
  const queryRunner = ds.createQueryRunner();
  try {
    await queryRunner.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      return await work(queryRunner);
    } finally {
      // Session locks outlive release(): the pooled connection would keep holding it.
      await queryRunner.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
    }
  } finally {
    await queryRunner.release();
  }
}

function executorOn(ds: DataSource, queryRunner: QueryRunner): MigrationExecutor {
  const executor = new MigrationExecutor(ds, queryRunner);
  executor.transaction = 'each';
  return executor;
}

/** Applies the pending migrations, each in its own transaction; returns their names. */
export async function runMigrations(ds: DataSource): Promise<string[]> {
  return withMigrationLock(ds, async (queryRunner) => {
    const applied = await executorOn(ds, queryRunner).executePendingMigrations();
    return applied.map((migration) => migration.name);
  });
}

/** Reverts every applied migration, newest first; returns their names. */
export async function revertAllMigrations(ds: DataSource): Promise<string[]> {
  return withMigrationLock(ds, async (queryRunner) => {
    const executor = executorOn(ds, queryRunner);
    const reverted: string[] = [];
    for (let executed = await executor.getExecutedMigrations(); executed.length > 0; executed = await executor.getExecutedMigrations()) {
      const newest = executed.reduce((a, b) => (b.timestamp > a.timestamp ? b : a));
      await executor.undoLastMigration();
      reverted.push(newest.name);
    }
    return reverted;
  });
}

/**
 * The SQL TypeORM would run to make the database match the entities; empty when the
 * committed migrations and the entities agree.
 */
export async function schemaDrift(ds: DataSource): Promise<string[]> {
  const log = await ds.driver.createSchemaBuilder().log();
  return log.upQueries.map((query) => query.query);
}
