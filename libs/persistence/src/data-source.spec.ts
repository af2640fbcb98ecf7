import { describe, expect, it } from 'vitest';
import { createDataSourceOptions, isEmbeddedDatabaseUrl, pgliteOfUrl } from './data-source';

describe('DATABASE_URL forms', () => {
  it('names PGlite in memory, PGlite in a directory, or a PostgreSQL server', () => {
    expect(pgliteOfUrl('memory')).toBe(true);
    expect(pgliteOfUrl('pglite://')).toBe(true);
    expect(pgliteOfUrl('pglite:///var/lib/anvil/db')).toEqual({ dataDir: '/var/lib/anvil/db' });
    expect(pgliteOfUrl('pglite://./data/db')).toEqual({ dataDir: './data/db' });
    expect(pgliteOfUrl('postgres://anvil@127.0.0.1:15432/anvil')).toBeUndefined();
    expect(isEmbeddedDatabaseUrl('memory')).toBe(true);
    expect(isEmbeddedDatabaseUrl('postgresql://x@h/db')).toBe(false);
  });

  it('builds node-postgres options for a server URL and the PGlite driver otherwise', () => {
    const server = createDataSourceOptions({ url: 'postgres://anvil@127.0.0.1:15432/anvil', poolSize: 3 }) as {
      url?: string;
      poolSize?: number;
      driver?: unknown;
    };
    expect(server.url).toBe('postgres://anvil@127.0.0.1:15432/anvil');
    expect(server.poolSize).toBe(3);
    expect(server.driver).toBeUndefined();
    for (const url of ['memory', 'pglite:///tmp/anvil-ds-spec']) {
      const embedded = createDataSourceOptions({ url }) as { url?: string; driver?: unknown };
      expect(embedded.url).toBeUndefined();
      expect(embedded.driver).toBeDefined();
    }
  });
});
