import { afterAll, beforeAll, describe } from 'vitest';
import type { DataSource } from 'typeorm';
import { MemoryBus, silentLogger } from '@anvil/messaging';
import { createDataSource, runMigrations } from '@anvil/persistence';
import { describeIngestionBehaviour } from './testing/ingestion-behaviour.suite';
import { describePoolBadInput } from './testing/pool-bad-input.suite';
import { describePoolBehaviour } from './testing/pool-behaviour.suite';
import { describePoolFilters } from './testing/pool-filters.suite';

/** The Data Pool on PGlite and the in-process bus (the embedded main job's stack). */
describe('Data Pool runtime (PGlite, in-process bus)', () => {
  let ds: DataSource;
  const bus = new MemoryBus({ logger: silentLogger });
  beforeAll(async () => {
    ds = createDataSource();
    await ds.initialize();
    await runMigrations(ds);
  }, 120_000);
  afterAll(async () => {
    await bus.close();
    await ds?.destroy();
  });
  const env = { ds: () => ds, bus: () => bus, drain: async () => undefined };
  describePoolBehaviour(env);
  describePoolFilters(env);
  describePoolBadInput(env);
  describeIngestionBehaviour('PGlite', () => ds);
});
