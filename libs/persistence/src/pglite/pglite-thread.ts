import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { QueryOptions, Results } from '@electric-sql/pglite';
import { PGLITE_THREAD_SOURCE } from './pglite-thread-source';

/** What the driver uses of a PGlite instance: a PGlite itself, or a PgliteThread that owns one on a worker thread. */
export interface PgliteDb {
  readonly waitReady: Promise<void>;
  readonly closed: boolean;
  query<T = Record<string, unknown>>(text: string, params?: unknown[], options?: QueryOptions): Promise<Results<T>>;
  exec(text: string, options?: QueryOptions): Promise<Results[]>;
  isInTransaction(): boolean;
  close(): Promise<void>;
}

interface Pending {
  resolve(m: Reply): void;
  reject(err: Error): void;
  onNotice?: QueryOptions['onNotice'];
}
interface Reply {
  id: number;
  ok?: boolean;
  result?: Results;
  results?: Results[];
  inTransaction?: boolean;
  error?: Record<string, unknown> & { message: string; name: string };
  notice?: Record<string, unknown>;
}

const BYTEA_OID = 17;
/** The statements TypeORM and the pool open a transaction with (no isolation level or other options). */
const TRANSACTION_START = /^\s*(START TRANSACTION|BEGIN)\s*;?\s*$/i;
const TRANSACTION_END = /^\s*(COMMIT|ROLLBACK)\s*;?\s*$/i;
const BYTEA_ARRAY_OID = 1001;

/**
 * An embedded PGlite that runs on its own worker thread. PGlite is Postgres compiled to
 * WebAssembly: every statement runs synchronously on the thread that owns it. On the main thread
 * it took about half of the embedded main job's main thread (a profile of the RL phase: 48% of
 * samples in PGlite's wasm and JS), which is also where the gateway, the Data Pool and the
 * rollout-manager run their JavaScript; on a worker, statements run beside them, on the core the
 * engine leaves free. Same answers as PGlite in-process: parameters are prepared by the caller
 * exactly as before, and rows are parsed in the worker by the same pg parsers (bytea comes back
 * as a Buffer, as pg gives it).
 */
export class PgliteThread implements PgliteDb {
  readonly waitReady: Promise<void>;
  #closed = false;
  #inTransaction = false;
  #nextId = 1;
  readonly #pending = new Map<number, Pending>();
  readonly #worker: Worker;
  #failure: Error | null = null;
  /** A transaction start not sent yet (exec): it travels with the next request. */
  #deferredBegin: string | null = null;

  constructor(dataDir?: string) {
    const req = createRequire(typeof __filename === 'string' ? __filename : join(process.cwd(), 'noop.js'));
    this.#worker = new Worker(PGLITE_THREAD_SOURCE, {
      eval: true,
      workerData: { pglitePath: req.resolve('@electric-sql/pglite'), pgPath: req.resolve('pg'), dataDir },
      // PGlite's wasm heap grows as the database does; keep the worker's JS heap modest but not tiny.
      resourceLimits: { maxOldGenerationSizeMb: 512 },
    });
    this.#worker.unref();
    this.waitReady = new Promise<void>((resolve, reject) => {
      const onReady = (m: { ready?: boolean; error?: Reply['error'] }) => {
        if (m.ready === undefined) return;
        this.#worker.off('message', onReady);
        if (m.ready) resolve();
        else reject(this.#fail(toError(m.error)));
      };
      this.#worker.on('message', onReady);
      this.#worker.once('error', (err) => reject(this.#fail(err)));
    });
    this.#worker.on('message', (m: Reply) => this.#onReply(m));
    this.#worker.on('error', (err) => this.#fail(err));
    this.#worker.on('exit', (code) => {
      if (!this.#closed) this.#fail(new Error(`the PGlite worker thread exited (code ${code}) while the database was open`));
    });
  }

  get closed(): boolean {
    return this.#closed;
  }

  isInTransaction(): boolean {
    return this.#inTransaction || this.#deferredBegin !== null;
  }

  async query<T = Record<string, unknown>>(text: string, params?: unknown[], options?: QueryOptions): Promise<Results<T>> {
    const reply = await this.#request({ op: 'query', text, params, rowMode: options?.rowMode }, options?.onNotice);
    return withBuffers(reply.result as Results<T>);
  }

  async exec(text: string, options?: QueryOptions): Promise<Results[]> {
    if (!this.#inTransaction && !this.#deferredBegin && !this.#failure && !this.#closed && TRANSACTION_START.test(text)) {
      // Answered here and sent with the next statement: a transaction start returns nothing, and
      // each message is a round trip through two event loops (about 0.8 ms each in the main job,
      // its lock held meanwhile) that a transaction of two or three statements otherwise pays once more.
      this.#deferredBegin = text;
      return [{ rows: [], fields: [], affectedRows: 0 }];
    }
    if (this.#deferredBegin !== null && !this.#inTransaction && TRANSACTION_END.test(text)) {
      // an empty transaction: nothing reached the database, so nothing needs to go
      this.#deferredBegin = null;
      return [{ rows: [], fields: [], affectedRows: 0 }];
    }
    const reply = await this.#request({ op: 'exec', text, rowMode: options?.rowMode }, options?.onNotice);
    return (reply.results ?? []).map((r) => withBuffers(r));
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    try {
      if (!this.#failure) await this.#request({ op: 'close' });
    } finally {
      this.#closed = true;
      await this.#worker.terminate();
    }
  }

  #request(msg: Record<string, unknown>, onNotice?: QueryOptions['onNotice']): Promise<Reply> {
    if (this.#failure) return Promise.reject(this.#failure);
    if (this.#closed) return Promise.reject(new Error('PGlite is closed'));
    const id = this.#nextId++;
    const begin = msg.op === 'close' ? null : this.#deferredBegin;
    this.#deferredBegin = null;
    return new Promise<Reply>((resolve, reject) => {
      if (this.#pending.size === 0) this.#worker.ref();
      this.#pending.set(id, { resolve, reject, onNotice });
      this.#worker.postMessage({ ...msg, id, notices: onNotice !== undefined, ...(begin ? { begin } : {}) });
    });
  }

  #onReply(m: Reply): void {
    const p = this.#pending.get(m.id);
    if (!p) return;
    if (m.notice) {
      p.onNotice?.(m.notice as never);
      return;
    }
    this.#pending.delete(m.id);
    if (this.#pending.size === 0) this.#worker.unref();
    if (m.inTransaction !== undefined) this.#inTransaction = m.inTransaction;
    if (m.ok) p.resolve(m);
    else p.reject(toError(m.error));
  }

  /** The worker died or never started: every waiting and later request fails with the reason. */
  #fail(err: Error): Error {
    this.#failure ??= err;
    this.#inTransaction = false;
    this.#deferredBegin = null;
    for (const p of this.#pending.values()) p.reject(this.#failure);
    this.#pending.clear();
    this.#worker.unref();
    return this.#failure;
  }
}

/** A database error as the worker sent it, with its fields (code, detail, constraint, ...) back on an Error. */
function toError(e: Reply['error']): Error {
  if (!e) return new Error('the PGlite worker failed without a reason');
  const { message, name, stack: _stack, ...fields } = e;
  const err = new Error(message);
  err.name = name;
  return Object.assign(err, fields);
}

/** A structured clone turns Buffers into plain Uint8Arrays: give bytea values back as Buffers (views, no copy). */
function withBuffers<T>(r: Results<T>): Results<T> {
  const byteaFields = r.fields.map((f, i) => ({ f, i })).filter(({ f }) => f.dataTypeID === BYTEA_OID || f.dataTypeID === BYTEA_ARRAY_OID);
  if (byteaFields.length === 0 || r.rows.length === 0) return r;
  const asArray = Array.isArray(r.rows[0]);
  for (const row of r.rows as Record<string | number, unknown>[]) {
    for (const { f, i } of byteaFields) {
      const key = asArray ? i : f.name;
      row[key] = toBuffer(row[key]);
    }
  }
  return r;
}

function toBuffer(v: unknown): unknown {
  if (v instanceof Uint8Array && !Buffer.isBuffer(v)) return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  if (Array.isArray(v)) return v.map(toBuffer);
  return v;
}
