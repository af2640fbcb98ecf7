import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { PGlite } from '@electric-sql/pglite';
import { DataSource, QueryFailedError } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDataSource } from '../data-source';
import { createPgliteDriver } from './pglite-driver';

const jitter = () => sleep(Math.floor(Math.random() * 3));

describe('PGlite driver', () => {
  let ds: DataSource;

  beforeAll(async () => {
    ds = createDataSource();
    await ds.initialize();
    // PGlite compiles its WebAssembly on first use: slow on a loaded machine.
  }, 120_000);
  afterAll(async () => {
    await ds?.destroy();
  });

  it('serialises concurrent transactions: read-modify-write with rollbacks ends exactly right', async () => {
    await ds.query('CREATE TABLE counters (id int PRIMARY KEY, value int NOT NULL)');
    await ds.query('CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)');
    await ds.query('CREATE TABLE ledger (tx int NOT NULL)');
    await ds.query('INSERT INTO counters VALUES (1, 0)');
    await ds.query('INSERT INTO accounts VALUES (1, 1000), (2, 0)');

    const transactions = 60;
    const rolledBack = (i: number) => i % 4 === 0;
    const work = Array.from({ length: transactions }, (_, i) =>
      ds
        .transaction(async (m) => {
          // A plain read-modify-write (no FOR UPDATE): exact only if nobody else runs in between.
          const [{ value }] = await m.query('SELECT value FROM counters WHERE id = 1');
          await jitter();
          await m.query('UPDATE counters SET value = $1 WHERE id = 1', [value + 1]);
          await m.query('INSERT INTO ledger (tx) VALUES ($1)', [i]);
          // A transfer in two statements: between them the books do not balance.
          await m.query('UPDATE accounts SET balance = balance - 10 WHERE id = 1');
          await jitter();
          await m.query('UPDATE accounts SET balance = balance + 10 WHERE id = 2');
          if (rolledBack(i)) throw new Error(`rollback ${i}`);
        })
        .then(
          () => 'committed',
          () => 'rolled back',
        ),
    );
    // Plain queries from other "connections" while the transactions run: they must only
    // ever see committed states, never the middle of a transfer.
    const readers = Array.from({ length: 40 }, async () => {
      await jitter();
      const [{ total }] = await ds.query('SELECT sum(balance)::int AS total FROM accounts');
      return total as number;
    });

    const outcomes = await Promise.all(work);
    const totals = await Promise.all(readers);
    const committed = outcomes.filter((o) => o === 'committed').length;
    expect(committed).toBe(45);
    expect(totals.every((t) => t === 1000)).toBe(true);
    expect(await ds.query('SELECT value FROM counters WHERE id = 1')).toEqual([{ value: committed }]);
    const ledger: { tx: number }[] = await ds.query('SELECT tx FROM ledger ORDER BY tx');
    expect(ledger.map((r) => r.tx)).toEqual(Array.from({ length: transactions }, (_, i) => i).filter((i) => !rolledBack(i)));
    expect(await ds.query('SELECT id, balance FROM accounts ORDER BY id')).toEqual([
      { id: 1, balance: 1000 - 10 * committed },
      { id: 2, balance: 10 * committed },
    ]);
  });

  it('makes every other query wait while a transaction holds the session', async () => {
    await ds.query('CREATE TABLE held (v int)');
    const owner = ds.createQueryRunner();
    await owner.connect();
    await owner.startTransaction();
    await owner.query('INSERT INTO held VALUES (1)');

    let answered = false;
    const waiting = ds.query('SELECT count(*)::int AS n FROM held').then((rows) => {
      answered = true;
      return rows;
    });
    await sleep(100);
    expect(answered).toBe(false);

    await owner.rollbackTransaction();
    await owner.release();
    expect(await waiting).toEqual([{ n: 0 }]);
  });

  it('rolls back a transaction whose query runner is released without ending it', async () => {
    await ds.query('CREATE TABLE abandoned (v int)');
    const careless = ds.createQueryRunner();
    await careless.startTransaction();
    await careless.query('INSERT INTO abandoned VALUES (1)');
    await careless.release();

    expect(await ds.query('SELECT count(*)::int AS n FROM abandoned')).toEqual([{ n: 0 }]);
    // The next holder starts outside any transaction: its own BEGIN/COMMIT are real.
    await ds.transaction((m) => m.query('INSERT INTO abandoned VALUES (2)'));
    expect(await ds.query('SELECT v FROM abandoned')).toEqual([{ v: 2 }]);
  });

  it('fails loudly instead of hanging when the session is never released', async () => {
    const impatient = new DataSource({ type: 'postgres', driver: createPgliteDriver(), connectTimeoutMS: 200 });
    await impatient.initialize();
    const hog = impatient.createQueryRunner();
    await hog.connect();
    try {
      await expect(impatient.query('SELECT 1')).rejects.toThrow(/waited 200 ms for the PGlite session/);
    } finally {
      await hog.release();
      await impatient.destroy();
    }
  });

  it('speaks like node-postgres: parameter preparation, type parsing, errors', async () => {
    const when = new Date('2026-01-02T03:04:05.678Z');
    const [row] = await ds.query(
      `SELECT 9007199254740993::int8 AS big, 1.50::numeric AS num, $1::bytea AS bytes, $2::timestamptz AS at,
              $3::jsonb AS doc, $4::int4[] AS ints, $5::text[] AS texts, $6::boolean AS flag, NULL::int AS nothing`,
      [Buffer.from([0, 1, 254, 255]), when, { a: [1, 'two'] }, [1, 2, 3], ['a', 'b,c'], false],
    );
    expect(row).toEqual({
      big: '9007199254740993',
      num: '1.50',
      bytes: Buffer.from([0, 1, 254, 255]),
      at: when,
      doc: { a: [1, 'two'] },
      ints: [1, 2, 3],
      texts: ['a', 'b,c'],
      flag: false,
      nothing: null,
    });
    expect(Buffer.isBuffer(row.bytes)).toBe(true);

    await ds.query('CREATE TABLE uniq (id int PRIMARY KEY)');
    await ds.query('INSERT INTO uniq VALUES (1)');
    const err = await ds.query('INSERT INTO uniq VALUES ($1)', [1]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QueryFailedError);
    expect((err as QueryFailedError & { driverError: { code: string; constraint: string } }).driverError).toMatchObject({
      code: '23505',
      constraint: 'uniq_pkey',
    });
  });

  it('answers UPDATE and DELETE with affected row counts, and multi-statement text with one result each', async () => {
    await ds.query('CREATE TABLE counted (v int)');
    await ds.query('INSERT INTO counted VALUES (1), (2), (3)');
    expect(await ds.query('UPDATE counted SET v = v + $1 WHERE v > 1', [10])).toEqual([[], 2]);
    const qr = ds.createQueryRunner();
    try {
      const result = await qr.query('DELETE FROM counted WHERE v > $1', [5], true);
      expect(result.affected).toBe(2);
    } finally {
      await qr.release();
    }
  });

  it('keeps a data directory across restarts, and refuses to open it twice at once', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'anvil-pglite-'));
    try {
      const first = createDataSource({ pglite: { dataDir: dir } });
      await first.initialize();
      await first.query('CREATE TABLE kept (v text)');
      await first.query('INSERT INTO kept VALUES ($1)', ['survives']);
      await expect(createDataSource({ pglite: { dataDir: dir } }).initialize()).rejects.toThrow(/already open/);
      await first.destroy();

      const second = createDataSource({ pglite: { dataDir: dir } });
      await second.initialize();
      expect(await second.query('SELECT v FROM kept')).toEqual([{ v: 'survives' }]);
      await second.destroy();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('why the session is leased: a naively shared PGlite session', () => {
  it('nests BEGIN inside BEGIN and lets one transaction’s ROLLBACK undo another’s committed work', async () => {
    const db = new PGlite();
    try {
      await db.query('CREATE TABLE t (v int)');
      const notices: string[] = [];
      const onNotice = (n: { message?: string }) => notices.push(n.message ?? '');
      // Two "connections" (as typeorm-pglite hands out) running one transaction each, interleaved.
      await db.query('BEGIN', [], { onNotice }); // A
      await db.query('INSERT INTO t VALUES (1)'); // A
      await db.query('BEGIN', [], { onNotice }); // B: no new transaction, only a warning
      await db.query('INSERT INTO t VALUES (2)'); // B
      await db.query('ROLLBACK'); // B gives up ... and takes A's insert with it
      await db.query('COMMIT', [], { onNotice }); // A believes it committed
      expect(notices).toEqual(['there is already a transaction in progress', 'there is no transaction in progress']);
      expect((await db.query('SELECT v FROM t')).rows).toEqual([]);
    } finally {
      await db.close();
    }
  });

  it('is not what the driver does: the same interleaving through TypeORM keeps A and drops only B', async () => {
    const ds = createDataSource();
    await ds.initialize();
    try {
      await ds.query('CREATE TABLE t (v int)');
      let releaseA!: () => void;
      const aMayCommit = new Promise<void>((resolve) => (releaseA = resolve));
      const a = ds.transaction(async (m) => {
        await m.query('INSERT INTO t VALUES (1)');
        await aMayCommit;
      });
      const b = ds.transaction(async (m) => {
        await m.query('INSERT INTO t VALUES (2)');
        throw new Error('B rolls back');
      });
      await sleep(20);
      releaseA();
      await a;
      await expect(b).rejects.toThrow('B rolls back');
      expect(await ds.query('SELECT v FROM t')).toEqual([{ v: 1 }]);
    } finally {
      await ds.destroy();
    }
  });
});
