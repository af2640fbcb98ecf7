import type { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDataSource, LlmCall, MIGRATIONS, runMigrations } from '@anvil/persistence';
import { createScratchDatabase, type ScratchDatabase } from '@anvil/testing';
import { describeMigrationBehaviour } from '@anvil/persistence/testing';
import { EventStore, describeStoreBehaviour, describeBatchBehaviour, describeIngestionBehaviour } from '@anvil/middleware/testing';
import { llmCall, newRolloutIds, redeliver } from '@anvil/contracts/testing';

// Real server: `node tools/infra/postgres.mjs start` prints DATABASE_URL (the test runner does it).
const serverUrl = process.env.DATABASE_URL;
if (!serverUrl) throw new Error('DATABASE_URL is not set; start a server with `node tools/infra/postgres.mjs start`');

/** A database of this file's own on the server, so the migration tests start from empty. */
let db: ScratchDatabase;
let ds: DataSource;

beforeAll(async () => {
  db = await createScratchDatabase(serverUrl, 'anvil_test');
  ds = createDataSource({ url: db.url, poolSize: 10 });
  await ds.initialize();
});

afterAll(async () => {
  await ds?.destroy();
  await db?.drop();
});

describe('migrations on PostgreSQL', () => {
  describeMigrationBehaviour(() => ds);
});

describeStoreBehaviour('PostgreSQL', () => ds);

describe('PostgreSQL specifics', () => {
  it('delivers one large call 16 times at once over 10 connections: one row, no errors', async () => {
    const events = new EventStore(ds);
    const ids = newRolloutIds();
    const promptIds = Int32Array.from({ length: 64_000 }, (_, i) => i * 7 - 100_000);
    const call = llmCall(ids, { promptIds });
    const results = await Promise.all(Array.from({ length: 16 }, () => events.applyEvent(redeliver(call))));
    expect(results.filter(Boolean)).toHaveLength(1);
    expect(await ds.manager.countBy(LlmCall, { rolloutId: ids.rolloutId })).toBe(1);
  });

  it('lets several services migrate one database at the same time: each migration runs once', async () => {
    const raced = await createScratchDatabase(serverUrl, 'anvil_test_race');
    const services = Array.from({ length: 3 }, () => createDataSource({ url: raced.url, poolSize: 2 }));
    try {
      await Promise.all(services.map((s) => s.initialize()));
      const applied = await Promise.all(services.map((s) => runMigrations(s)));
      expect(applied.flat()).toEqual(MIGRATIONS.map((m) => m.name));
    } finally {
      await Promise.all(services.map((s) => (s.isInitialized ? s.destroy() : undefined)));
      await raced.drop();
    }
  });
});
describeBatchBehaviour('PostgreSQL', () => ds);
describeIngestionBehaviour('PostgreSQL', () => ds);
