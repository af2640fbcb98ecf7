#!/usr/bin/env node
// Local single-node Apache Kafka (KRaft, combined broker+controller) for tests and benches.
//
// CLI
//   node tools/infra/kafka.mjs install                fetch the broker jars (idempotent)
//   node tools/infra/kafka.mjs start [--fresh]        start (no-op when already running); prints brokers
//   node tools/infra/kafka.mjs stop                   SIGTERM, wait, SIGKILL
//   node tools/infra/kafka.mjs status                 exit 0 running / 3 stopped
//   node tools/infra/kafka.mjs brokers                prints 127.0.0.1:<port>
//   node tools/infra/kafka.mjs perf-test ARGS...      org.apache.kafka.tools.ProducerPerformance ARGS
//                                                     (--bootstrap-server added unless given)
//
// API (import from tools/infra/kafka.mjs or tools/infra/lib.mjs)
//   await installKafka()                    -> { version, libsDir }
//   await startKafka({ fresh, port, timeoutMs }) -> { brokers: '127.0.0.1:19092', port, pid, alreadyRunning, logFile }
//   await stopKafka({ port })               -> { stopped: boolean }   (false: was not running)
//   kafkaStatus({ port })                   -> { running, pid, brokers, stateDir }
//   kafkaBrokers({ port })                  -> '127.0.0.1:19092'
//   await runProducerPerf(args, { port, echo }) -> { code, output }
//
// Env: KAFKA_PORT (default 19092), KAFKA_CONTROLLER_PORT (default KAFKA_PORT+1), KAFKA_VERSION
// (default below; must match a version kafka-pom.xml can resolve), KAFKA_HEAP_OPTS (default
// -Xms256m -Xmx512m), KAFKA_START_TIMEOUT_MS (default 120000), ANVIL_CACHE_DIR (default <repo>/.cache).
//
// Layout: jars in .cache/kafka/<version>/libs; broker state per port in .cache/kafka/broker-<port>/
// (server.properties, data/, logs/server.log, stdout.log, kafka.pid). Start/stop of one port are
// serialised across processes by a lock file, so concurrent `start`s are safe: the first starts the
// broker, the others find it running. `--fresh` wipes data only when this call starts the broker; a
// running broker is left alone (stop it first to wipe it).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeFileSync, existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  aptInstall,
  cacheDir,
  canConnect,
  cmdlineOf,
  infraDir,
  isAlive,
  isMain,
  log,
  parseArgs,
  parsePort,
  readPid,
  run,
  safeUnlink,
  sleep,
  tailFile,
  terminate,
  which,
  withLock,
} from './util.mjs';

const TAG = 'kafka';
/** Newest Kafka 4.x on Maven Central at the time of writing; kafkajs 2.2.4 verified against it. */
export const KAFKA_VERSION = process.env.KAFKA_VERSION || '4.4.0';
const MAIN_CLASS = 'kafka.Kafka';
const STORAGE_TOOL = 'kafka.tools.StorageTool';
const PERF_CLASS = 'org.apache.kafka.tools.ProducerPerformance';
const pomFile = join(infraDir, 'kafka-pom.xml');
const log4jConfig = join(infraDir, 'kafka-log4j2.xml');
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

const kafkaCache = join(cacheDir, 'kafka');
export const libsDir = (version = KAFKA_VERSION) => join(kafkaCache, version, 'libs');

function ports(port) {
  const p = parsePort(port ?? process.env.KAFKA_PORT, 19092, 'KAFKA_PORT');
  const c = parsePort(process.env.KAFKA_CONTROLLER_PORT, p + 1, 'KAFKA_CONTROLLER_PORT');
  if (c === p) throw new Error('KAFKA_CONTROLLER_PORT must differ from KAFKA_PORT');
  return { port: p, controllerPort: c };
}

function paths(port) {
  const stateDir = join(kafkaCache, `broker-${port}`);
  return {
    stateDir,
    dataDir: join(stateDir, 'data'),
    logsDir: join(stateDir, 'logs'),
    logFile: join(stateDir, 'logs', 'server.log'),
    stdoutFile: join(stateDir, 'stdout.log'),
    propsFile: join(stateDir, 'server.properties'),
    pidFile: join(stateDir, 'kafka.pid'),
    lockFile: join(kafkaCache, `broker-${port}.lock`),
  };
}

export const kafkaBrokers = ({ port } = {}) => `127.0.0.1:${ports(port).port}`;

function ensureJavaAndMaven() {
  const missing = [];
  if (!which('java')) missing.push('openjdk-17-jre-headless');
  if (!which('mvn')) missing.push('maven');
  if (missing.length) aptInstall(missing, TAG);
}

/** Fetches the broker, kafka-tools and the log4j2 binding with Maven into .cache/kafka/<v>/libs. */
export async function installKafka({ version = KAFKA_VERSION } = {}) {
  const libs = libsDir(version);
  const ready = () => existsSync(libs) && readdirSync(libs).some((f) => f.startsWith(`kafka_2.13-${version}`));
  if (ready()) return { version, libsDir: libs };
  return withLock(
    join(kafkaCache, `${version}.install.lock`),
    async () => {
      if (ready()) return { version, libsDir: libs };
      ensureJavaAndMaven();
      const tmp = `${libs}.tmp-${process.pid}`;
      rmSync(tmp, { recursive: true, force: true });
      log(TAG, `fetching Kafka ${version} from Maven Central (mvn dependency:copy-dependencies)`);
      const t0 = Date.now();
      const r = run(
        'mvn',
        [
          '-B',
          '-q',
          '-f',
          pomFile,
          `-Dkafka.version=${version}`,
          'dependency:copy-dependencies',
          `-DoutputDirectory=${tmp}`,
          '-DincludeScope=runtime',
        ],
        {
          allowFail: true,
          cwd: infraDir,
          timeoutMs: 15 * 60_000,
        },
      );
      if (r.status !== 0) {
        rmSync(tmp, { recursive: true, force: true });
        throw new Error(`mvn failed to fetch Kafka ${version}:\n${(r.stdout + r.stderr).slice(-4000)}`);
      }
      rmSync(libs, { recursive: true, force: true });
      renameSync(tmp, libs); // atomic: a libs dir that exists is complete
      log(TAG, `Kafka ${version} fetched in ${((Date.now() - t0) / 1000).toFixed(1)} s -> ${libs}`);
      return { version, libsDir: libs };
    },
    { tag: TAG },
  );
}

function javaArgs(libs, logsDir, logFileName, heap) {
  return [
    ...heap.split(/\s+/).filter(Boolean),
    '-XX:+UseG1GC',
    '-XX:MaxGCPauseMillis=20',
    '-XX:InitiatingHeapOccupancyPercent=35',
    '-XX:+ExplicitGCInvokesConcurrent',
    '-Djava.awt.headless=true',
    `-Dlog4j2.configurationFile=${log4jConfig}`,
    `-Dkafka.logs.dir=${logsDir}`,
    `-Dkafka.log.file=${logFileName}`,
    '-cp',
    join(libs, '*'),
  ];
}

/** The running broker's pid for this port, or null (stale pid files are ignored). */
function runningPid(p) {
  const pid = readPid(p.pidFile);
  if (pid === null || !isAlive(pid)) return null;
  const cmd = cmdlineOf(pid);
  // Guard against pid reuse: it must be our broker, started with this state dir.
  if (cmd && !(cmd.includes(MAIN_CLASS) && cmd.includes(p.propsFile))) return null;
  return pid;
}

export function kafkaStatus({ port } = {}) {
  const { port: kp } = ports(port);
  const p = paths(kp);
  const pid = runningPid(p);
  return { running: pid !== null, pid, brokers: `127.0.0.1:${kp}`, stateDir: p.stateDir };
}

function serverProperties({ port, controllerPort, dataDir }) {
  return [
    '# Generated by tools/infra/kafka.mjs; rewritten on every start.',
    'process.roles=broker,controller',
    'node.id=1',
    `controller.quorum.bootstrap.servers=127.0.0.1:${controllerPort}`,
    `listeners=PLAINTEXT://127.0.0.1:${port},CONTROLLER://127.0.0.1:${controllerPort}`,
    `advertised.listeners=PLAINTEXT://127.0.0.1:${port}`,
    'controller.listener.names=CONTROLLER',
    'inter.broker.listener.name=PLAINTEXT',
    'listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT',
    `log.dirs=${dataDir}`,
    'num.network.threads=2',
    'num.io.threads=4',
    'num.partitions=3',
    'default.replication.factor=1',
    'auto.create.topics.enable=true',
    'offsets.topic.replication.factor=1',
    'offsets.topic.num.partitions=10',
    'transaction.state.log.replication.factor=1',
    'transaction.state.log.min.isr=1',
    'transaction.state.log.num.partitions=10',
    'share.coordinator.state.topic.replication.factor=1',
    'share.coordinator.state.topic.min.isr=1',
    'group.initial.rebalance.delay.ms=0',
    `message.max.bytes=${MAX_MESSAGE_BYTES}`,
    `replica.fetch.max.bytes=${MAX_MESSAGE_BYTES}`,
    `socket.request.max.bytes=${4 * MAX_MESSAGE_BYTES}`,
    'log.retention.hours=24',
    'log.segment.bytes=134217728',
    '',
  ].join('\n');
}

function newClusterId() {
  for (;;) {
    const id = randomBytes(16).toString('base64url');
    if (!id.startsWith('-')) return id;
  }
}

/** Starts the broker (formatting storage when --fresh or never formatted) and waits until ready. */
export async function startKafka({ fresh = false, port, timeoutMs } = {}) {
  const { port: kp, controllerPort } = ports(port);
  const p = paths(kp);
  const { libsDir: libs } = await installKafka();
  const limit = timeoutMs ?? Number(process.env.KAFKA_START_TIMEOUT_MS || 120_000);
  return withLock(
    p.lockFile,
    async () => {
      const existing = runningPid(p);
      if (existing !== null) {
        if (fresh) log(TAG, `already running (pid ${existing}); --fresh ignored (stop it first to wipe it)`);
        else log(TAG, `already running (pid ${existing})`);
        if (!(await canConnect(kp)))
          throw new Error(`broker pid ${existing} is alive but 127.0.0.1:${kp} refuses connections; see ${p.logFile}`);
        return { brokers: `127.0.0.1:${kp}`, port: kp, pid: existing, alreadyRunning: true, logFile: p.logFile };
      }
      for (const port_ of [kp, controllerPort]) {
        if (await canConnect(port_)) {
          throw new Error(
            `127.0.0.1:${port_} is already in use by a process not started by ${p.stateDir} (set KAFKA_PORT / KAFKA_CONTROLLER_PORT)`,
          );
        }
      }
      safeUnlink(p.pidFile);
      if (fresh) rmSync(p.stateDir, { recursive: true, force: true });
      mkdirSync(p.logsDir, { recursive: true });
      mkdirSync(p.dataDir, { recursive: true });
      writeFileSync(p.propsFile, serverProperties({ port: kp, controllerPort, dataDir: p.dataDir }));
      // Keep the previous run's log for post-mortems; readiness is judged on a fresh file.
      if (existsSync(p.logFile)) renameSync(p.logFile, `${p.logFile}.1`);

      const heap = process.env.KAFKA_HEAP_OPTS || '-Xms256m -Xmx512m';
      if (!existsSync(join(p.dataDir, 'meta.properties'))) {
        const clusterId = newClusterId();
        log(TAG, `formatting ${p.dataDir} (cluster ${clusterId}, standalone KRaft controller)`);
        run(
          'java',
          [
            ...javaArgs(libs, p.logsDir, 'storage.log', '-Xmx256m'),
            STORAGE_TOOL,
            'format',
            '--standalone',
            '-t',
            clusterId,
            '-c',
            p.propsFile,
          ],
          { cwd: p.stateDir, timeoutMs: 120_000 },
        );
      }

      const out = openSync(p.stdoutFile, 'w');
      const t0 = Date.now();
      const child = spawn('java', [...javaArgs(libs, p.logsDir, 'server.log', heap), MAIN_CLASS, p.propsFile], {
        cwd: p.stateDir,
        detached: true,
        stdio: ['ignore', out, out],
      });
      closeSync(out);
      let spawnError = null;
      child.once('error', (e) => (spawnError = e));
      child.unref();
      if (!child.pid) throw new Error(`could not start java: ${spawnError?.message ?? 'no pid'}`);
      writeFileSync(p.pidFile, `${child.pid}\n`);
      log(TAG, `starting broker pid ${child.pid} on 127.0.0.1:${kp} (controller ${controllerPort}), logs ${p.logsDir}`);

      const failure = (why) => {
        const tail = [tailFile(p.stdoutFile, 3000), tailFile(p.logFile, 6000)].filter(Boolean).join('\n--- server.log ---\n');
        return new Error(`Kafka broker ${why}.\n--- log tail (${p.stateDir}) ---\n${tail || '(empty)'}`);
      };
      const deadline = t0 + limit;
      for (;;) {
        if (spawnError) throw failure(`could not be spawned: ${spawnError.message}`);
        if (!isAlive(child.pid)) {
          safeUnlink(p.pidFile);
          throw failure('exited during startup');
        }
        if (readLogSafe(p.logFile).includes('Kafka Server started') && (await canConnect(kp))) break;
        if (Date.now() > deadline) {
          await terminate(child.pid, 10_000, TAG);
          safeUnlink(p.pidFile);
          throw failure(`did not become ready within ${limit} ms`);
        }
        await sleep(200);
      }
      log(TAG, `ready on 127.0.0.1:${kp} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      return { brokers: `127.0.0.1:${kp}`, port: kp, pid: child.pid, alreadyRunning: false, logFile: p.logFile };
    },
    { tag: TAG },
  );
}

function readLogSafe(file) {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

/** Stops the broker on this port: SIGTERM (controlled shutdown), then SIGKILL after 30 s. */
export async function stopKafka({ port } = {}) {
  const { port: kp } = ports(port);
  const p = paths(kp);
  return withLock(
    p.lockFile,
    async () => {
      const pid = runningPid(p);
      if (pid === null) {
        safeUnlink(p.pidFile);
        return { stopped: false };
      }
      log(TAG, `stopping broker pid ${pid}`);
      const killed = await terminate(pid, 30_000, TAG);
      safeUnlink(p.pidFile);
      log(TAG, killed ? 'broker killed' : 'broker stopped');
      return { stopped: true };
    },
    { tag: TAG },
  );
}

/**
 * Runs kafka-producer-perf-test (ProducerPerformance) with `args`, against this port's broker unless
 * the args name servers themselves. Output is returned (and echoed to stdout when `echo`).
 */
export async function runProducerPerf(args, { port, echo = false } = {}) {
  const { libsDir: libs } = await installKafka();
  const brokers = kafkaBrokers({ port });
  const a = [...args];
  const hasServers = a.some((x) => x.startsWith('bootstrap.servers=') || x.startsWith('--bootstrap-server'));
  if (!hasServers) a.push('--bootstrap-server', brokers);
  const logsDir = join(kafkaCache, 'tools-logs');
  mkdirSync(logsDir, { recursive: true });
  return new Promise((resolvePromise, reject) => {
    const child = spawn('java', [...javaArgs(libs, logsDir, 'perf-test.log', '-Xmx512m'), PERF_CLASS, ...a], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const onData = (d) => {
      output += d;
      if (echo) process.stdout.write(d);
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('error', reject);
    child.once('close', (code) => resolvePromise({ code: code ?? 1, output }));
  });
}

async function main(argv) {
  const { positional, flags } = parseArgs(argv);
  const cmd = positional[0];
  switch (cmd) {
    case 'install': {
      const r = await installKafka();
      console.log(r.libsDir);
      return 0;
    }
    case 'start': {
      const r = await startKafka({ fresh: Boolean(flags.fresh) });
      console.log(`KAFKA_BROKERS=${r.brokers}`);
      return 0;
    }
    case 'stop':
      await stopKafka();
      return 0;
    case 'status': {
      const s = kafkaStatus();
      console.log(s.running ? `running pid ${s.pid} brokers ${s.brokers}` : `stopped (${s.brokers})`);
      return s.running ? 0 : 3;
    }
    case 'brokers':
      console.log(kafkaBrokers());
      return 0;
    case 'perf-test': {
      const r = await runProducerPerf(argv.slice(argv.indexOf('perf-test') + 1), { echo: true });
      return r.code;
    }
    default:
      console.error('usage: node tools/infra/kafka.mjs install|start [--fresh]|stop|status|brokers|perf-test ARGS...');
      return 2;
  }
}

if (isMain(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      console.error(`[kafka] ${e.message}`);
      process.exit(1);
    },
  );
}
