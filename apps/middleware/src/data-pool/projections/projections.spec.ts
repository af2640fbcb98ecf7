import { afterAll, beforeAll } from 'vitest';
import type { DataSource } from 'typeorm';
import { createDataSource, runMigrations } from '@anvil/persistence';
import { describeStoreBehaviour } from './testing/store-behaviour.suite';
import { describeBatchBehaviour } from './testing/batch-behaviour.suite';

let ds: DataSource;

beforeAll(async () => {
  ds = createDataSource();
  await ds.initialize();
  await runMigrations(ds);
  // PGlite compiles its WebAssembly on first use: slow on a loaded machine.
}, 120_000);

afterAll(async () => {
  await ds?.destroy();
});

describeStoreBehaviour('PGlite', () => ds);
describeBatchBehaviour('PGlite', () => ds);
