import { expect, it } from 'vitest';
import type { DataSource } from 'typeorm';
import { MIGRATIONS_TABLE } from '../data-source';
import { MIGRATIONS } from '../migrations';
import { revertAllMigrations, runMigrations, schemaDrift } from '../migrate';

export const SCHEMA_TABLES = [
  'checkpoints',
  'data_pool_batch_stats',
  'data_pool_groups',
  'data_pool_queue',
  'data_pool_scheduler',
  'event_outbox',
  'gateway_calls',
  'gateway_outbox',
  'gateway_policy_state',
  'gateway_responses',
  'gateway_sessions',
  'llm_calls',
  'policy_activations',
  'policy_versions',
  'processed_events',
  'rewards',
  'rm_groups',
  'rm_rollouts',
  'rollout_groups',
  'rollouts',
  'task_sets',
  'tasks',
  'train_batch_blobs',
  'train_batches',
  'trajectories',
];

async function tables(ds: DataSource): Promise<string[]> {
  const rows: { name: string }[] = await ds.query(
    `SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`,
  );
  return rows.map((r) => r.name);
}

/**
 * Migration behaviour on an empty database, shared by PGlite and PostgreSQL. The tests run
 * in order on the same DataSource: apply, revert, apply again (ending migrated).
 */
export function describeMigrationBehaviour(dataSource: () => DataSource): void {
  const names = MIGRATIONS.map((m) => m.name);

  it('applies the committed migrations to an empty database, matching the entities exactly', async () => {
    const ds = dataSource();
    expect(await tables(ds)).toEqual([]);
    expect(await runMigrations(ds)).toEqual(names);
    expect(await tables(ds)).toEqual([...SCHEMA_TABLES, MIGRATIONS_TABLE].sort());
    // TypeORM would change nothing: names, types, nullability, indexes and keys all agree.
    expect(await schemaDrift(ds)).toEqual([]);
    expect(await runMigrations(ds)).toEqual([]);
  });

  it('reverts cleanly: every table gone, the migrations table empty', async () => {
    const ds = dataSource();
    expect(await revertAllMigrations(ds)).toEqual([...names].reverse());
    expect(await tables(ds)).toEqual([MIGRATIONS_TABLE]);
    expect(await ds.query(`SELECT count(*)::int AS n FROM "${MIGRATIONS_TABLE}"`)).toEqual([{ n: 0 }]);
    expect(await revertAllMigrations(ds)).toEqual([]);
  });

  it('re-applies after a full revert', async () => {
    const ds = dataSource();
    expect(await runMigrations(ds)).toEqual(names);
    expect(await schemaDrift(ds)).toEqual([]);
  });
}
