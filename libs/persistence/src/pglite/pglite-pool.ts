import { EventEmitter } from 'node:events';
import { PgliteClient } from './pglite-client';
import { SessionLock } from './session-lock';
import type { PgliteDb } from './pglite-thread';

type ConnectCallback = (err: Error | null, client?: PgliteClient, release?: () => void) => void;

/** The PGlite instance a pool serves and how to close it when the pool ends. */
export interface PgliteSession {
  db: PgliteDb;
  close: () => Promise<void>;
}

export interface PglitePoolOptions {
  /** pg's name for "how long to wait for a client"; TypeORM fills it from connectTimeoutMS. 0 waits forever. */
  connectionTimeoutMillis?: number;
}

/**
 * A pg.Pool look-alike over one PGlite instance with exactly one client at a time.
 *
 * PGlite is a single Postgres backend: every "connection" shares one session, so two
 * TypeORM transactions issued through separate query runners would interleave inside one
 * BEGIN (the second BEGIN only warns, and one ROLLBACK undoes both). Handing the session out
 * as an exclusive lease turns each query runner into a real connection: its transaction
 * owns the session until release(), and plain queries queue behind it.
 */
export class PglitePool extends EventEmitter {
  readonly pglite: PgliteDb;
  readonly #close: () => Promise<void>;
  readonly #lock = new SessionLock();
  readonly #timeoutMs: number;
  #ending: Promise<void> | null = null;

  constructor(session: PgliteSession, options: PglitePoolOptions = {}) {
    super();
    this.pglite = session.db;
    this.#close = session.close;
    this.#timeoutMs = options.connectionTimeoutMillis ?? 0;
  }

  get totalCount(): number {
    return 1;
  }
  get idleCount(): number {
    return this.#lock.held ? 0 : 1;
  }
  get waitingCount(): number {
    return this.#lock.waiting;
  }

  connect(): Promise<PgliteClient>;
  connect(callback: ConnectCallback): void;
  connect(callback?: ConnectCallback): Promise<PgliteClient> | void {
    const pending = this.#lease();
    if (!callback) return pending;
    pending.then(
      (client) => callback(null, client, () => client.release()),
      (err: Error) => callback(err),
    );
  }

  /** Waits for the current lease to end, then closes the session (createPgliteDriver's pools close their PGlite). */
  end(): Promise<void>;
  end(callback: (err?: Error) => void): void;
  end(callback?: (err?: Error) => void): Promise<void> | void {
    this.#ending ??= this.#lock.acquire().then(() => this.#close());
    if (!callback) return this.#ending;
    this.#ending.then(
      () => callback(),
      (err: Error) => callback(err),
    );
  }

  async #lease(): Promise<PgliteClient> {
    if (this.#ending) throw new Error('Cannot use a pool after calling end on the pool');
    await this.pglite.waitReady;
    const unlock = await this.#lock.acquire(this.#timeoutMs);
    if (this.#ending) {
      unlock();
      throw new Error('Cannot use a pool after calling end on the pool');
    }
    return new PgliteClient(this.pglite, () => {
      this.#resetSession().then(unlock, (err: Error) => {
        unlock();
        this.emit('error', err);
      });
    });
  }

  /** A lease that ends inside BEGIN must not leak its transaction into the next holder. */
  async #resetSession(): Promise<void> {
    if (this.pglite.closed) return;
    if (this.pglite.isInTransaction()) await this.pglite.exec('ROLLBACK');
  }
}
