import type { DataSource } from 'typeorm';

interface PoolClientLike {
  query(config: { name?: string; text: string; values?: unknown[] }): Promise<{ rows: unknown[] }>;
  release(): void;
}
interface PoolLike {
  query?: (config: { name?: string; text: string; values?: unknown[] }) => Promise<{ rows: unknown[] }>;
  connect(): Promise<PoolClientLike>;
}

/**
 * The gateway's per-call SQL, straight on the DataSource's connection pool: named statements
 * (node-postgres prepares each once per connection, so PostgreSQL parses and plans it once),
 * no query builder, no entity hydration. TypeORM still owns the schema (migrations) and the
 * admin paths. On PGlite (tests) the same SQL runs through its single session.
 */
export class SqlClient {
  constructor(private readonly ds: DataSource) {}

  private get pool(): PoolLike {
    return (this.ds.driver as unknown as { master: PoolLike }).master;
  }

  async query<R>(name: string, text: string, values: unknown[]): Promise<R[]> {
    const pool = this.pool;
    if (typeof pool.query === 'function') return (await pool.query({ name, text, values })).rows as R[];
    const client = await pool.connect();
    try {
      return (await client.query({ text, values })).rows as R[];
    } finally {
      client.release();
    }
  }
}
