import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataSource } from 'typeorm';
import { createDataSource, MIGRATIONS_TABLE } from './data-source';
import { revertAllMigrations, runMigrations, schemaDrift } from './migrate';
import { describeMigrationBehaviour } from './testing/migration-behaviour.suite';

describe('migrations on PGlite', () => {
  let ds: DataSource;
  beforeAll(async () => {
    ds = createDataSource();
    await ds.initialize();
    // PGlite compiles its WebAssembly on first use: slow on a loaded machine.
  }, 120_000);
  afterAll(async () => {
    await ds?.destroy();
  });

  describeMigrationBehaviour(() => ds);

  it('keeps the options honest: no synchronize, no implicit migration run', () => {
    expect(ds.options.synchronize).toBe(false);
    expect(ds.options.migrationsRun).toBe(false);
    expect(ds.options.migrationsTableName).toBe(MIGRATIONS_TABLE);
  });

  it('exposes schemaDrift, runMigrations and revertAllMigrations as plain functions', () => {
    expect([schemaDrift, runMigrations, revertAllMigrations].every((f) => typeof f === 'function')).toBe(true);
  });
});
