#!/usr/bin/env node
// Local PostgreSQL cluster for tests and benches (project-local, trust auth, loopback only).
//
// CLI
//   node tools/infra/postgres.mjs install            apt-get install postgresql when no server binaries exist
//   node tools/infra/postgres.mjs start [--fresh]    initdb (first time / --fresh) + pg_ctl start; prints DATABASE_URL
//   node tools/infra/postgres.mjs stop               pg_ctl stop -m fast
//   node tools/infra/postgres.mjs status             exit 0 running / 3 stopped
//   node tools/infra/postgres.mjs url [DB]           prints postgres://anvil@127.0.0.1:15432/<DB|anvil>
//   node tools/infra/postgres.mjs createdb NAME      creates database NAME if missing (server must run); prints its url
//
// API (import from tools/infra/postgres.mjs or tools/infra/lib.mjs)
//   await installPostgres()                       -> { binDir, version }
//   await startPostgres({ fresh, port })          -> { url: 'postgres://anvil@127.0.0.1:15432/anvil', port, dataDir, alreadyRunning }
//   await stopPostgres({ port })                  -> { stopped: boolean }   (false: was not running)
//   postgresStatus({ port })                      -> { running, pid, url, dataDir }
//   postgresUrl(database = 'anvil', { port })     -> 'postgres://anvil@127.0.0.1:15432/<database>'
//   await createDatabase(name, { port })          -> url of that database (idempotent)
//
// Env: PG_PORT (default 15432), ANVIL_CACHE_DIR (default <repo>/.cache).
//
// Layout: cluster per port in .cache/pg/<port>/ (data/, run/ = unix socket dir, postgres.log). As
// root, PostgreSQL refuses to run, so initdb/pg_ctl run as the `postgres` OS user (created by the
// Debian package) via runuser, and the cluster dir is chowned to it. When that user cannot reach
// the checkout (e.g. it lives under a 0700 home) or the socket path would be too long, the cluster
// lives in <tmpdir>/anvil-pg-<hash of cache path>-<port> instead. Superuser `anvil`, trust auth,
// listening on 127.0.0.1 only. Start/stop of one port are serialised across processes by a lock
// file; start when running is a no-op (`--fresh` then is ignored: stop first to wipe).
import { createHash } from 'node:crypto';
import { chownSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  aptInstall,
  cacheDir,
  canConnect,
  isAlive,
  isMain,
  isRoot,
  log,
  parseArgs,
  parsePort,
  run,
  sleep,
  tailFile,
  withLock,
} from './util.mjs';

const TAG = 'postgres';
const SUPERUSER = 'anvil';
const DEFAULT_DB = 'anvil';
const OS_USER = 'postgres';

const pgPort = (port) => parsePort(port ?? process.env.PG_PORT, 15432, 'PG_PORT');

export function postgresUrl(database = DEFAULT_DB, { port } = {}) {
  return `postgres://${SUPERUSER}@127.0.0.1:${pgPort(port)}/${database}`;
}

/** Highest-versioned PostgreSQL server bin dir under /usr/lib/postgresql, or null. */
function findBinDir() {
  const root = '/usr/lib/postgresql';
  let versions = [];
  try {
    versions = readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'initdb')) && existsSync(join(root, v, 'bin', 'pg_ctl')));
  } catch {
    return null;
  }
  versions.sort((a, b) => Number.parseFloat(b) - Number.parseFloat(a));
  return versions.length ? { binDir: join(root, versions[0], 'bin'), version: versions[0] } : null;
}

/** Installs PostgreSQL from apt when no server binaries are present (without a system cluster). */
export async function installPostgres() {
  const found = findBinDir();
  if (found) return found;
  return withLock(
    join(cacheDir, 'pg', 'install.lock'),
    async () => {
      const again = findBinDir();
      if (again) return again;
      // Don't let the Debian package create and start its own cluster on 5432: we run our own.
      // createcluster.conf include_dir's createcluster.d, so a drop-in there needs no conffile dance.
      if (isRoot()) {
        const dropIn = '/etc/postgresql-common/createcluster.d/anvil-no-main-cluster.conf';
        mkdirSync('/etc/postgresql-common/createcluster.d', { recursive: true });
        if (!existsSync(dropIn))
          writeFileSync(dropIn, '# written by anvil tools/infra/postgres.mjs: it runs its own cluster\ncreate_main_cluster = false\n');
      }
      aptInstall(['postgresql', 'postgresql-client'], TAG);
      const installed = findBinDir();
      if (!installed) throw new Error('postgresql installed but no /usr/lib/postgresql/<ver>/bin/initdb found');
      return installed;
    },
    { tag: TAG },
  );
}

function osUserIds() {
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${OS_USER}:`));
  if (!line) throw new Error(`OS user ${OS_USER} missing (it comes with the postgresql package)`);
  const [, , uid, gid] = line.split(':');
  return { uid: Number(uid), gid: Number(gid) };
}

/** Runs a PostgreSQL server binary as the postgres OS user when we are root. */
function pgRun(bin, args, opts = {}) {
  if (isRoot()) return run('runuser', ['-u', OS_USER, '--', bin, ...args], { cwd: '/', ...opts });
  return run(bin, args, opts);
}

function chownTree(dir, ids) {
  chownSync(dir, ids.uid, ids.gid);
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) chownTree(p, ids);
    else chownSync(p, ids.uid, ids.gid);
  }
}

/** Picks the cluster dir: .cache/pg/<port> when usable by the server user, else a tmp dir. */
function clusterDir(port) {
  const inRepo = join(cacheDir, 'pg', String(port));
  const fallback = join(tmpdir(), `anvil-pg-${createHash('sha1').update(cacheDir).digest('hex').slice(0, 10)}-${port}`);
  const socketPath = (dir) => join(dir, 'run', `.s.PGSQL.${port}`);
  if (Buffer.byteLength(socketPath(inRepo)) > 100) return fallback;
  if (isRoot()) {
    // Can the postgres user traverse to the cache dir? (Deterministic: depends only on ancestors.)
    let probe = cacheDir;
    while (!existsSync(probe)) probe = join(probe, '..');
    const r = run('runuser', ['-u', OS_USER, '--', 'test', '-x', probe], { allowFail: true, cwd: '/' });
    if (r.status !== 0) return fallback;
  }
  return inRepo;
}

function paths(port) {
  const dir = clusterDir(port);
  return {
    dir,
    dataDir: join(dir, 'data'),
    socketDir: join(dir, 'run'),
    logFile: join(dir, 'postgres.log'),
    lockFile: join(cacheDir, 'pg', `${port}.lock`),
  };
}

function postmasterPid(dataDir) {
  try {
    const pid = Number.parseInt(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0], 10);
    return Number.isInteger(pid) && isAlive(pid) ? pid : null;
  } catch {
    return null;
  }
}

export function postgresStatus({ port } = {}) {
  const p = paths(pgPort(port));
  const pid = postmasterPid(p.dataDir);
  return { running: pid !== null, pid, url: postgresUrl(DEFAULT_DB, { port }), dataDir: p.dataDir };
}

function psql(binDir, port, database, sql) {
  return run(
    join(binDir, 'psql'),
    ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-tA', '-h', '127.0.0.1', '-p', String(port), '-U', SUPERUSER, '-d', database, '-c', sql],
    {
      env: { ...process.env, PGCONNECT_TIMEOUT: '10', PGPASSWORD: '', PGSSLMODE: 'disable' },
      timeoutMs: 60_000,
    },
  ).stdout.trim();
}

function ensureDatabase(binDir, port, name) {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(name)) throw new Error(`invalid database name ${JSON.stringify(name)}`);
  const existsSql = `select 1 from pg_database where datname = '${name}'`;
  if (psql(binDir, port, 'postgres', existsSql) === '1') return false;
  try {
    psql(binDir, port, 'postgres', `create database "${name}"`);
    return true;
  } catch (e) {
    if (psql(binDir, port, 'postgres', existsSql) === '1') return false; // created concurrently
    throw e;
  }
}

/** Creates database `name` on the running cluster when missing; returns its url. */
export async function createDatabase(name, { port } = {}) {
  const { binDir } = await installPostgres();
  const pp = pgPort(port);
  if (ensureDatabase(binDir, pp, name)) log(TAG, `created database ${name}`);
  return postgresUrl(name, { port: pp });
}

function configBlock(port, socketDir) {
  return [
    '',
    '# --- anvil tools/infra/postgres.mjs ---',
    "listen_addresses = '127.0.0.1'",
    `port = ${port}`,
    `unix_socket_directories = '${socketDir}'`,
    'max_connections = 200',
    'shared_buffers = 128MB',
    'fsync = on',
    // A fresh cluster has no WAL segments to recycle: each new 16 MB segment was zero-filled and
    // fsynced inside some commit, a 100-165 ms stall about every 3 s at 5 MB/s of call tokens
    // (the Data Pool bench's p99). Without the zero fill a segment is created by writing its last
    // byte. 16 MB of WAL buffers (default 4 MB here) keep backends from writing WAL themselves.
    'wal_init_zero = off',
    'wal_buffers = 16MB',
    "timezone = 'UTC'",
    'logging_collector = off',
    'log_min_messages = warning',
    '',
  ].join('\n');
}

/** Starts the cluster (initdb on first use or with fresh), waits until it accepts connections. */
export async function startPostgres({ fresh = false, port } = {}) {
  const pp = pgPort(port);
  const { binDir } = await installPostgres();
  const p = paths(pp);
  return withLock(
    p.lockFile,
    async () => {
      const running = postmasterPid(p.dataDir);
      if (running !== null) {
        log(TAG, `already running (pid ${running})${fresh ? '; --fresh ignored (stop it first to wipe it)' : ''}`);
        ensureDatabase(binDir, pp, DEFAULT_DB);
        return { url: postgresUrl(DEFAULT_DB, { port: pp }), port: pp, dataDir: p.dataDir, alreadyRunning: true };
      }
      if (await canConnect(pp)) throw new Error(`127.0.0.1:${pp} is already in use by another process (set PG_PORT)`);
      if (fresh) rmSync(p.dir, { recursive: true, force: true });
      const ids = isRoot() ? osUserIds() : null;
      mkdirSync(p.socketDir, { recursive: true });
      if (ids) chownTree(p.dir, ids);
      if (!existsSync(join(p.dataDir, 'PG_VERSION'))) {
        rmSync(p.dataDir, { recursive: true, force: true });
        log(TAG, `initdb ${p.dataDir}`);
        pgRun(
          join(binDir, 'initdb'),
          ['-D', p.dataDir, '--auth=trust', '-U', SUPERUSER, '--encoding=UTF8', '--no-locale', '--no-instructions'],
          {
            timeoutMs: 180_000,
          },
        );
        const conf = join(p.dataDir, 'postgresql.conf');
        writeFileSync(conf, readFileSync(conf, 'utf8') + configBlock(pp, p.socketDir));
        if (ids) chownSync(conf, ids.uid, ids.gid);
      }
      const t0 = Date.now();
      const r = pgRun(join(binDir, 'pg_ctl'), ['-D', p.dataDir, '-l', p.logFile, '-w', '-t', '120', 'start'], {
        allowFail: true,
        timeoutMs: 180_000,
      });
      if (r.status !== 0) {
        throw new Error(
          `pg_ctl start failed (${r.status}):\n${(r.stdout + r.stderr).trim()}\n--- ${p.logFile} ---\n${tailFile(p.logFile, 4000)}`,
        );
      }
      // pg_ctl -w waits for "ready to accept connections"; double-check the TCP listener.
      for (let i = 0; i < 50 && !(await canConnect(pp)); i++) await sleep(100);
      ensureDatabase(binDir, pp, DEFAULT_DB);
      log(TAG, `ready on 127.0.0.1:${pp} in ${((Date.now() - t0) / 1000).toFixed(1)} s (data ${p.dataDir})`);
      return { url: postgresUrl(DEFAULT_DB, { port: pp }), port: pp, dataDir: p.dataDir, alreadyRunning: false };
    },
    { tag: TAG },
  );
}

/** Stops the cluster with pg_ctl stop -m fast (falling back to -m immediate). */
export async function stopPostgres({ port } = {}) {
  const pp = pgPort(port);
  const p = paths(pp);
  return withLock(
    p.lockFile,
    async () => {
      const pid = postmasterPid(p.dataDir);
      if (pid === null) return { stopped: false };
      const found = findBinDir();
      if (!found) throw new Error(`postgres pid ${pid} runs but no pg_ctl found`);
      log(TAG, `stopping pid ${pid}`);
      const pgCtl = join(found.binDir, 'pg_ctl');
      const r = pgRun(pgCtl, ['-D', p.dataDir, '-w', '-t', '60', '-m', 'fast', 'stop'], { allowFail: true, timeoutMs: 90_000 });
      if (r.status !== 0 && postmasterPid(p.dataDir) !== null) {
        log(TAG, `fast stop failed, using immediate: ${(r.stdout + r.stderr).trim()}`);
        pgRun(pgCtl, ['-D', p.dataDir, '-w', '-t', '30', '-m', 'immediate', 'stop'], { allowFail: true, timeoutMs: 60_000 });
      }
      if (postmasterPid(p.dataDir) !== null) throw new Error(`postgres pid ${pid} did not stop; see ${p.logFile}`);
      log(TAG, 'stopped');
      return { stopped: true };
    },
    { tag: TAG },
  );
}

async function main(argv) {
  const { positional, flags } = parseArgs(argv);
  switch (positional[0]) {
    case 'install': {
      const r = await installPostgres();
      console.log(r.binDir);
      return 0;
    }
    case 'start': {
      const r = await startPostgres({ fresh: Boolean(flags.fresh) });
      console.log(`DATABASE_URL=${r.url}`);
      return 0;
    }
    case 'stop':
      await stopPostgres();
      return 0;
    case 'status': {
      const s = postgresStatus();
      console.log(s.running ? `running pid ${s.pid} ${s.url}` : `stopped (${s.url})`);
      return s.running ? 0 : 3;
    }
    case 'url':
      console.log(postgresUrl(positional[1] ?? DEFAULT_DB));
      return 0;
    case 'createdb': {
      if (!positional[1]) throw new Error('usage: postgres.mjs createdb NAME');
      console.log(await createDatabase(positional[1]));
      return 0;
    }
    default:
      console.error('usage: node tools/infra/postgres.mjs install|start [--fresh]|stop|status|url [DB]|createdb NAME');
      return 2;
  }
}

if (isMain(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      console.error(`[postgres] ${e.message}`);
      process.exit(1);
    },
  );
}
