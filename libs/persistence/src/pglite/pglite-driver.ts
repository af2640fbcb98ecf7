import { resolve } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { pgParamSerializers, pgTypeParsers } from './pg-compat';
import { PglitePool, type PglitePoolOptions, type PgliteSession } from './pglite-pool';
import { PgliteThread, type PgliteDb } from './pglite-thread';

export interface PgliteDriverOptions {
  /** Directory of a persistent database; omitted means in memory. */
  dataDir?: string;
  /**
   * Where PGlite runs: 'main' in this thread; 'worker' on a worker thread of its own, so its
   * statements do not block the services' JavaScript (pglite-thread.ts). Absent: ANVIL_PGLITE_THREAD
   * (main | worker), else 'main'. The main job asks for 'worker' (its RL phase runs about 1.7x faster
   * there); tests and the other hosts keep the thread they run on.
   */
  thread?: 'main' | 'worker';
}

/** The thread ANVIL_PGLITE_THREAD names, `fallback` when it is unset. */
export function pgliteThreadOf(env: NodeJS.ProcessEnv = process.env, fallback: 'main' | 'worker' = 'main'): 'main' | 'worker' {
  const v = env.ANVIL_PGLITE_THREAD;
  if (v === undefined || v === '') return fallback;
  if (v === 'main') return 'main';
  if (v === 'worker') return 'worker';
  throw new Error(`ANVIL_PGLITE_THREAD must be "main" or "worker", got "${v}"`);
}

/** What TypeORM's PostgresDriver reads from its `driver` option (the `pg` module): only `Pool`. */
export interface PgliteDriverModule {
  Pool: new (options?: PglitePoolOptions) => PglitePool;
}

// Two PGlite instances over one directory would each believe they own the files.
const openDataDirs = new Set<string>();

function openSession(dataDir: string | undefined, thread: 'main' | 'worker'): PgliteSession {
  if (dataDir !== undefined) {
    if (openDataDirs.has(dataDir)) throw new Error(`PGlite data directory ${dataDir} is already open in this process`);
    openDataDirs.add(dataDir);
  }
  const db: PgliteDb =
    thread === 'worker' ? new PgliteThread(dataDir) : new PGlite({ dataDir, parsers: pgTypeParsers(), serializers: pgParamSerializers() });
  // A failed start surfaces on the first connect(); keep it from being an unhandled rejection meanwhile.
  db.waitReady.catch(() => undefined);
  return {
    db,
    close: async () => {
      try {
        const started = await db.waitReady.then(
          () => true,
          () => false,
        );
        if (started && !db.closed) await db.close();
      } finally {
        if (dataDir !== undefined) openDataDirs.delete(dataDir);
      }
    },
  };
}

/**
 * A `pg` replacement for TypeORM (`{ type: 'postgres', driver: createPgliteDriver() }`).
 * Each Pool TypeORM creates opens its own PGlite and closes it on end(), so a DataSource
 * can be destroyed and initialized again (an in-memory database starts empty again).
 */
export function createPgliteDriver(options: PgliteDriverOptions = {}): PgliteDriverModule {
  const dataDir = options.dataDir === undefined ? undefined : resolve(options.dataDir);
  const thread = options.thread ?? pgliteThreadOf();
  return {
    Pool: class PgliteDriverPool extends PglitePool {
      constructor(poolOptions: PglitePoolOptions = {}) {
        super(openSession(dataDir, thread), poolOptions);
      }
    },
  };
}
