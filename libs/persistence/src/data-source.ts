import 'reflect-metadata';
import { DataSource, type DataSourceOptions, type LoggerOptions } from 'typeorm';
import { ENTITIES } from './entities';
import { MIGRATIONS } from './migrations';
import { createPgliteDriver } from './pglite/pglite-driver';

export interface CreateDataSourceOptions {
  /**
   * A PostgreSQL server (postgres://user@host:port/db), through node-postgres; or embedded
   * PGlite: `pglite://<dir>` (persisted in that directory), `pglite://` or `memory` (in memory).
   * Wins over `pglite`.
   */
  url?: string;
  /** Embedded PGlite, the default without a url: `true` (or omitted) keeps it in memory, `dataDir` persists it. */
  pglite?: { dataDir?: string } | true;
  logging?: LoggerOptions;
  /** Server connections in the pool (node-postgres default 10). PGlite always has exactly one session. */
  poolSize?: number;
  /** Where embedded PGlite runs: this thread or a worker thread of its own (absent: ANVIL_PGLITE_THREAD, else this thread). */
  pgliteThread?: 'main' | 'worker';
}

/** How long a query runner waits for the single PGlite session before failing loudly (a likely self-deadlock). */
const PGLITE_SESSION_WAIT_MS = 60_000;

export const MIGRATIONS_TABLE = 'schema_migrations';

export function createDataSourceOptions(options: CreateDataSourceOptions = {}): DataSourceOptions {
  const common = {
    type: 'postgres',
    entities: ENTITIES,
    migrations: MIGRATIONS,
    migrationsTableName: MIGRATIONS_TABLE,
    // The schema is what the committed migrations say, applied when runMigrations() is called.
    synchronize: false,
    migrationsRun: false,
    migrationsTransactionMode: 'each',
    // Nothing here needs an extension; never try CREATE EXTENSION on a managed server.
    installExtensions: false,
    applicationName: 'anvil',
    logging: options.logging ?? false,
  } as const;
  const embedded = options.url ? pgliteOfUrl(options.url) : options.pglite;
  if (options.url && embedded === undefined) return { ...common, url: options.url, poolSize: options.poolSize };
  const dataDir = embedded === true || embedded === undefined ? undefined : embedded.dataDir;
  return { ...common, driver: createPgliteDriver({ dataDir, thread: options.pgliteThread }), connectTimeoutMS: PGLITE_SESSION_WAIT_MS };
}

/**
 * The embedded database a DATABASE_URL names: `memory` or `pglite://` -> in memory,
 * `pglite://<dir>` -> that directory (`pglite:///abs/dir` or `pglite://./rel/dir`); undefined
 * for a server URL.
 */
export function pgliteOfUrl(url: string): { dataDir?: string } | true | undefined {
  if (url === 'memory' || url === 'pglite://' || url === 'pglite:memory') return true;
  if (!url.startsWith('pglite://')) return undefined;
  return { dataDir: decodeURIComponent(url.slice('pglite://'.length)) };
}

/** True when `url` names an embedded (PGlite) database rather than a PostgreSQL server. */
export const isEmbeddedDatabaseUrl = (url: string): boolean => pgliteOfUrl(url) !== undefined;

/** A DataSource for Anvil's schema, not yet initialized (call initialize(), then runMigrations()). */
export function createDataSource(options: CreateDataSourceOptions = {}): DataSource {
  return new DataSource(createDataSourceOptions(options));
}
