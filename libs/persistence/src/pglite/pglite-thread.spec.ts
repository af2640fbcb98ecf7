import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDataSource } from '../data-source';
import { pgParamSerializers, pgTypeParsers, prepareParams } from './pg-compat';
import { pgliteThreadOf } from './pglite-driver';
import { PgliteThread } from './pglite-thread';

/** One statement of each kind the services send, asked of PGlite in-process and on its thread: the answers must be equal. */
const PROBES: { text: string; params?: unknown[]; rowMode?: 'array' }[] = [
  {
    text: 'SELECT $1::bytea AS b, $2::int8 AS big, $3::numeric AS num, $4::float8 AS f, $5::jsonb AS j, $6::timestamptz AS t',
    params: [Buffer.from([0, 1, 254, 255]), '9007199254740993', '1.25', 0.1, { a: [1, 'x'] }, new Date(1_700_000_000_000)],
  },
  {
    text: 'SELECT ARRAY[$1::bytea, $2::bytea] AS bs, ARRAY[1.5, 2]::float4[] AS fs, NULL::text AS n',
    params: [Buffer.from('ab'), Buffer.alloc(0)],
  },
  { text: 'SELECT x, x::bytea AS xb FROM (VALUES ($1::text), ($2::text)) v(x) ORDER BY x', params: ['b', 'a'], rowMode: 'array' },
];

describe('PGlite on a worker thread', () => {
  let local: PGlite;
  let thread: PgliteThread;

  beforeAll(async () => {
    local = new PGlite({ parsers: pgTypeParsers(), serializers: pgParamSerializers() });
    thread = new PgliteThread();
    await Promise.all([local.waitReady, thread.waitReady]);
  }, 120_000);
  afterAll(async () => {
    await thread?.close();
    await local?.close();
  });

  it('answers every probe exactly as PGlite in this thread does, bytea as Buffers', async () => {
    for (const p of PROBES) {
      const params = p.params ? prepareParams(p.params) : undefined;
      const want = await local.query(p.text, params, { rowMode: p.rowMode ?? 'object' });
      const got = await thread.query(p.text, params, { rowMode: p.rowMode ?? 'object' });
      expect(got.rows).toEqual(want.rows);
      expect(got.fields).toEqual(want.fields);
    }
    const { rows } = await thread.query<{ b: Buffer; bs: Buffer[] }>(
      'SELECT $1::bytea AS b, ARRAY[$1::bytea] AS bs',
      prepareParams([Buffer.from([7, 8, 9])]),
    );
    expect(Buffer.isBuffer(rows[0].b)).toBe(true);
    expect([...rows[0].b]).toEqual([7, 8, 9]);
    expect(Buffer.isBuffer(rows[0].bs[0])).toBe(true);
  });

  it('sends a transaction start with the next statement, with the same outcomes as sent alone', async () => {
    await thread.exec('CREATE TABLE deferred (id int PRIMARY KEY)');
    // committed: the start reached the database with the insert
    await thread.exec('START TRANSACTION');
    expect(thread.isInTransaction()).toBe(true);
    await thread.query('INSERT INTO deferred VALUES ($1)', [1]);
    await thread.exec('COMMIT');
    expect(thread.isInTransaction()).toBe(false);
    // rolled back: the insert was inside the transaction, so nothing stays
    await thread.exec('BEGIN');
    await thread.query('INSERT INTO deferred VALUES ($1)', [2]);
    await thread.exec('ROLLBACK');
    // a failing first statement fails inside the transaction, which must then be rolled back
    await thread.exec('START TRANSACTION');
    await expect(thread.query('INSERT INTO deferred VALUES ($1)', [1])).rejects.toThrow(/duplicate key/);
    expect(thread.isInTransaction()).toBe(true);
    await expect(thread.query('SELECT 1')).rejects.toThrow(/current transaction is aborted/);
    await thread.exec('ROLLBACK');
    expect(thread.isInTransaction()).toBe(false);
    // an empty transaction ends without reaching the database
    await thread.exec('BEGIN');
    await thread.exec('COMMIT');
    expect(thread.isInTransaction()).toBe(false);
    expect((await thread.query('SELECT array_agg(id ORDER BY id) AS ids FROM deferred')).rows).toEqual([{ ids: [1] }]);
  });

  it('runs several statements through exec and tracks the transaction state', async () => {
    const results = await thread.exec('CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, $$one$$); SELECT v FROM t');
    expect(results.map((r) => r.rows)).toEqual([[], [], [{ v: 'one' }]]);
    expect(thread.isInTransaction()).toBe(false);
    await thread.exec('BEGIN');
    expect(thread.isInTransaction()).toBe(true);
    await thread.query('INSERT INTO t VALUES (2, $1)', ['two']);
    await thread.exec('ROLLBACK');
    expect(thread.isInTransaction()).toBe(false);
    expect((await thread.query('SELECT count(*)::int AS n FROM t')).rows).toEqual([{ n: 1 }]);
  });

  it('fails a bad statement with the database error fields, and forwards notices', async () => {
    const err = await thread.query('INSERT INTO t VALUES (1, $1)', ['dup']).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err).toMatchObject({ code: '23505', constraint: 't_pkey' });
    expect((err as Error).message).toMatch(/duplicate key/);
    const notices: unknown[] = [];
    await thread.exec(`DO $$ BEGIN RAISE NOTICE 'hello %', 42; END $$`, { onNotice: (n) => notices.push(n) });
    expect(notices).toEqual([expect.objectContaining({ message: 'hello 42' })]);
    // the session is usable after an error
    expect((await thread.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
  });

  it('persists to a data directory and refuses requests once closed', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'anvil-pglite-thread-'));
    try {
      const a = new PgliteThread(dir);
      await a.exec('CREATE TABLE kept (x int); INSERT INTO kept VALUES (5)');
      await a.close();
      expect(a.closed).toBe(true);
      await expect(a.query('SELECT 1')).rejects.toThrow(/closed/);
      const b = new PgliteThread(dir);
      expect((await b.query('SELECT x FROM kept')).rows).toEqual([{ x: 5 }]);
      await b.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('is what the TypeORM driver runs with ANVIL_PGLITE_THREAD=worker (main by default)', async () => {
    expect(pgliteThreadOf({})).toBe('main');
    expect(pgliteThreadOf({}, 'worker')).toBe('worker');
    expect(pgliteThreadOf({ ANVIL_PGLITE_THREAD: 'main' }, 'worker')).toBe('main');
    expect(pgliteThreadOf({ ANVIL_PGLITE_THREAD: 'worker' })).toBe('worker');
    expect(() => pgliteThreadOf({ ANVIL_PGLITE_THREAD: 'gpu' })).toThrow(/main" or "worker/);
    const before = process.env.ANVIL_PGLITE_THREAD;
    process.env.ANVIL_PGLITE_THREAD = 'worker';
    const ds = createDataSource();
    if (before === undefined) delete process.env.ANVIL_PGLITE_THREAD;
    else process.env.ANVIL_PGLITE_THREAD = before;
    await ds.initialize();
    try {
      const pool = (ds.driver as unknown as { master: { pglite: unknown } }).master;
      expect(pool.pglite).toBeInstanceOf(PgliteThread);
      const [row] = await ds.query('SELECT $1::bytea AS b', [Buffer.from('hi')]);
      expect(Buffer.isBuffer(row.b) && row.b.toString()).toBe('hi');
    } finally {
      await ds.destroy();
    }
  }, 120_000);

  it('runs on the thread its data source asks for', async () => {
    const ds = createDataSource({ pgliteThread: 'worker' });
    await ds.initialize();
    try {
      expect((ds.driver as unknown as { master: { pglite: unknown } }).master.pglite).toBeInstanceOf(PgliteThread);
      expect(await ds.query('SELECT 1 + 1 AS two')).toEqual([{ two: 2 }]);
    } finally {
      await ds.destroy();
    }
  }, 120_000);
});
