/**
 * The source of the worker thread that owns an embedded PGlite (see pglite-thread.ts). Plain
 * CommonJS run with `eval: true`, so it needs no TypeScript loader in the worker (tsx, vitest and
 * the compiled dist/ all start it the same way); it loads PGlite and pg from the absolute paths the
 * main thread resolved (workerData.pglitePath, workerData.pgPath).
 *
 * Parsers and the bytea serializer are pg-compat.ts's (pgTypeParsers, pgParamSerializers), written
 * again here because this code cannot import TypeScript: keep the two in step. The parsers use
 * the worker's own copy of pg's type registry, so a pg.types.setTypeParser() made on the main
 * thread does not reach the embedded database (the project makes none).
 *
 * Protocol, one message each way per request (the main thread holds the session lock, so requests
 * arrive one transaction at a time; PGlite queues any overlap itself):
 *   -> { id, op: 'query', text, params, rowMode, notices }   <- { id, ok, result, inTransaction }
 *   -> { id, op: 'exec', text, rowMode, notices }             <- { id, ok, results, inTransaction }
 *   -> { id, op: 'close' }                                    <- { id, ok }
 *   A query or exec may carry `begin` (the transaction start the main thread deferred): it runs
 *   first, and a failure of either answers the request with that error.
 *   <- { id, notice }   a NOTICE raised while request `id` ran
 *   <- { ready: true } | { ready: false, error }   once, at start
 * A failed request answers { id, ok: false, error: { message, name, ...the DatabaseError's fields } }.
 */
export const PGLITE_THREAD_SOURCE = String.raw`
const { parentPort, workerData } = require('node:worker_threads');
const { PGlite } = require(workerData.pglitePath);
const pg = require(workerData.pgPath);

const BYTEA_OID = 17;
const parsers = {};
for (const oid of Object.values(pg.types.builtins)) parsers[oid] = (text) => pg.types.getTypeParser(oid, 'text')(text);
const serializers = {
  [BYTEA_OID]: (value) => {
    if (typeof value === 'string') return value;
    if (value instanceof Uint8Array) return '\\x' + Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex');
    throw new TypeError('bytea parameter must be a Buffer, a Uint8Array or a string');
  },
};

const plainError = (err) => {
  const out = { message: String((err && err.message) || err), name: (err && err.name) || 'Error' };
  if (err && typeof err === 'object') for (const [k, v] of Object.entries(err)) if (v === null || ['string', 'number', 'boolean'].includes(typeof v)) out[k] = v;
  return out;
};
const plainResult = (r) => ({ rows: r.rows, fields: r.fields, affectedRows: r.affectedRows, command: r.command, rowCount: r.rowCount });

const db = new PGlite({ dataDir: workerData.dataDir, parsers, serializers });
db.waitReady.then(
  () => parentPort.postMessage({ ready: true }),
  (err) => parentPort.postMessage({ ready: false, error: plainError(err) }),
);

parentPort.on('message', async (m) => {
  const options = { rowMode: m.rowMode || 'object' };
  if (m.notices) options.onNotice = (notice) => parentPort.postMessage({ id: m.id, notice: plainError(notice) });
  try {
    if (m.begin) await db.exec(m.begin, options);
    if (m.op === 'query') {
      const r = await db.query(m.text, m.params, options);
      parentPort.postMessage({ id: m.id, ok: true, result: plainResult(r), inTransaction: db.isInTransaction() });
    } else if (m.op === 'exec') {
      const rs = await db.exec(m.text, options);
      parentPort.postMessage({ id: m.id, ok: true, results: rs.map(plainResult), inTransaction: db.isInTransaction() });
    } else if (m.op === 'close') {
      if (!db.closed) await db.close();
      parentPort.postMessage({ id: m.id, ok: true });
      parentPort.close();
    } else {
      throw new Error('unknown PGlite thread op ' + m.op);
    }
  } catch (err) {
    parentPort.postMessage({ id: m.id, ok: false, error: plainError(err), inTransaction: db.closed ? false : db.isInTransaction() });
  }
});
`;
