import { afterAll, beforeAll } from 'vitest';
import type { DataSource } from 'typeorm';
import { createDataSource } from '../data-source';
import { runMigrations } from '../migrate';
import { describeStoreBehaviour } from '../testing/store-behaviour.suite';
import { describeBatchBehaviour } from '../testing/batch-behaviour.suite';

let ds: DataSource;

beforeAll(async () => {
  ds = createDataSource();
  await ds.initialize();
  await runMigrations(ds);
});

afterAll(async () => {
  await ds?.destroy();
});

describeStoreBehaviour('PGlite', () => ds);
describeBatchBehaviour('PGlite', () => ds);
