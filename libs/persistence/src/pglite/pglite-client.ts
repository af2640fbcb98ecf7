import { EventEmitter } from 'node:events';
import type { QueryOptions } from '@electric-sql/pglite';
import { prepareParams, toPgResult, type PgQueryResult } from './pg-compat';
import type { PgliteDb } from './pglite-thread';

type QueryCallback = (err: Error | null, result?: PgQueryResult | PgQueryResult[]) => void;
interface QueryConfig {
  text: string;
  values?: unknown[];
  rowMode?: 'array';
}

/**
 * The pg.PoolClient look-alike a TypeORM QueryRunner holds. It is a lease on the one PGlite
 * session: while it exists nobody else runs SQL, so BEGIN..COMMIT issued through it is a
 * real, isolated transaction. Supported: query(text | config, values?, callback?), release().
 */
export class PgliteClient extends EventEmitter {
  #released = false;

  constructor(
    private readonly db: PgliteDb,
    private readonly onRelease: () => void,
  ) {
    super();
  }

  get released(): boolean {
    return this.#released;
  }

  query(config: string | QueryConfig, values?: unknown[]): Promise<PgQueryResult | PgQueryResult[]>;
  query(config: string | QueryConfig, callback: QueryCallback): void;
  query(config: string | QueryConfig, values: unknown[] | undefined, callback: QueryCallback): void;
  query(
    config: string | QueryConfig,
    valuesOrCallback?: unknown[] | QueryCallback,
    maybeCallback?: QueryCallback,
  ): Promise<PgQueryResult | PgQueryResult[]> | void {
    if (typeof config === 'object' && typeof (config as { submit?: unknown }).submit === 'function') {
      // pg-query-stream and other Submittables drive the wire protocol themselves.
      throw new TypeError('the PGlite driver does not support streaming queries (Submittable)');
    }
    const callback = typeof valuesOrCallback === 'function' ? valuesOrCallback : maybeCallback;
    const values = typeof valuesOrCallback === 'function' ? undefined : valuesOrCallback;
    const text = typeof config === 'string' ? config : config.text;
    const params = values ?? (typeof config === 'string' ? undefined : config.values);
    const rowMode = typeof config === 'string' ? undefined : config.rowMode;

    const pending = this.#run(text, params, rowMode);
    if (!callback) return pending;
    pending.then(
      (result) => callback(null, result),
      (err: Error) => callback(err),
    );
  }

  /** Gives the session back; a transaction left open is rolled back before anyone else gets it. */
  release(): void {
    if (this.#released) throw new Error('Release called on client which has already been released to the pool.');
    this.#released = true;
    this.onRelease();
  }

  async #run(text: string, values: unknown[] | undefined, rowMode: 'array' | undefined): Promise<PgQueryResult | PgQueryResult[]> {
    if (this.#released) throw new Error('Client was released to the pool; it cannot run queries any more.');
    const options: QueryOptions = {
      rowMode: rowMode ?? 'object',
      onNotice: (notice) => this.emit('notice', notice),
    };
    const asArray = rowMode === 'array';
    if (values && values.length > 0) {
      return toPgResult(await this.db.query(text, prepareParams(values), options), asArray);
    }
    // Like pg: no parameters means the simple protocol, which allows several statements
    // and answers with one result per statement.
    const results = await this.db.exec(text, options);
    return results.length === 1 ? toPgResult(results[0], asArray) : results.map((r) => toPgResult(r, asArray));
  }
}
