/**
 * `anvil stack up`: the distributed run in the foreground. Starts Kafka and PostgreSQL
 * (tools/infra, installed on first use; or uses --brokers/--database), builds dist/ when it is
 * stale, finds the starting weights (the warm start or your model), starts the five services as
 * their own processes (logs to <runDir>/logs/<service>.log) with the settings of the one mapping
 * (config/service-settings.ts), drives the run with the same driver as `anvil train` over the
 * services' HTTP APIs and Kafka, writes the report, stops the services and prints the JSON summary
 * as its last line. Ctrl-C (or `anvil stack down`) stops the services gracefully.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createBus, type MessageBus } from '@anvil/messaging';
import { EXIT } from '../cli/command';
import type { RunConfig } from '../config/run-config';
import { serviceEnv, START_WAVES, STOP_WAVES, type App, type RunInfrastructure, type RunWiring } from '../config/service-settings';
import { RolloutManagerClient, TrainerClient } from '../run/distributed/clients';
import { connectDistributedServices } from '../run/distributed/distributed-services';
import { RunStopped } from '../run/driver';
import { startingModel } from '../run/starting-model';
import { taskSetOf } from '../run/task-set';
import { trainRun } from '../run/train-run';
import { build, staleDist } from './dist-freshness';
import { createRunDatabase, runDatabaseName } from './run-database';
import { alive, startServiceProcess, STOP_TIMEOUT_MS, stopProcess, tail, waitReady, type RunningService } from './service-process';
import { liveRun, readState, writeState, type StackState } from './stack-state';

export interface UpOptions {
  cfg: RunConfig;
  /** Existing infrastructure (both or neither): Kafka bootstrap servers and a PostgreSQL server URL. */
  brokers?: string;
  database?: string;
  /** Leave the services running after the run (until `anvil stack down`). */
  keepServices: boolean;
  /** Rebuild dist/ when a source is newer than it. */
  build: boolean;
}

export async function up(opts: UpOptions): Promise<number> {
  const { cfg } = opts;
  if (Boolean(opts.brokers) !== Boolean(opts.database)) {
    console.error('--brokers and --database go together (existing infrastructure); leave both out to start Kafka and PostgreSQL locally');
    return EXIT.usage;
  }
  const dataDir = resolve(cfg.dataDir);
  const previous = readState(dataDir);
  if (previous && liveRun(previous)) {
    console.error(
      `a stack run is up already (${previous.runId}, driver pid ${previous.driverPid}): \`anvil stack status\` shows it, \`anvil stack down\` stops it`,
    );
    return EXIT.failed;
  }

  const stop = new AbortController();
  const services: RunningService[] = [];
  // The state file's content (a holder: signal handlers and the stop path read it too).
  const run: { state: StackState | null; stopping: Promise<void> | null; spawning: boolean } = {
    state: null,
    stopping: null,
    spawning: false,
  };
  const saveState = (s: StackState) => {
    run.state = s;
    writeState(dataDir, s);
  };
  const update = (over: Partial<StackState>) => run.state && saveState({ ...run.state, ...over });
  const stopServices = async () => {
    await (run.stopping ??= stopAll(services, (left) => update({ services: left })));
    // Services that were still starting when a stop began (Ctrl-C during start-up).
    const late = services.filter((s) => alive(s.pid));
    if (late.length) await stopAll(late, (left) => update({ services: left }));
  };
  let firstSignalAt = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    const now = Date.now();
    if (!stop.signal.aborted) {
      firstSignalAt = now;
      console.log(
        `\n${sig}: stopping the run and the services (each drains its in-flight work; the same signal again after a few seconds kills them)`,
      );
      stop.abort();
      update({ phase: 'stopping' });
      // Before any service is spawned there is nothing to stop; once they are, the start path unwinds and stops them.
      if (!run.spawning) process.exit(130);
      void stopServices();
      return;
    }
    // npm and tsx may relay the terminal's one Ctrl-C a second time: only a later one means "now".
    if (now - firstSignalAt < 3_000) return;
    console.log(`${sig} again: killing the services`);
    for (const s of services) if (alive(s.pid)) process.kill(s.pid, 'SIGKILL');
    process.exit(130);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  let bus: MessageBus | null = null;
  try {
    // 1. Infrastructure.
    let brokers: string;
    let serverUrl: string;
    let infra: StackState['infra'];
    if (opts.brokers && opts.database) {
      [brokers, serverUrl, infra] = [opts.brokers, opts.database, 'external'];
    } else {
      console.log('infrastructure: Kafka and PostgreSQL (tools/infra; installed on first use) ...');
      const { startStack } = await import('@anvil/infra');
      const s = await startStack({});
      [brokers, serverUrl, infra] = [s.brokers, s.url, 'local'];
    }
    // 2. The services' build.
    const stale = opts.build ? staleDist() : null;
    if (stale) {
      console.log(`building dist/ (${stale}) ...`);
      build();
    }
    // 3. The starting weights: the same (cached) warm start or model directory `anvil train` starts from.
    const start = await startingModel(cfg, (l) => console.log(l));
    // The services run with their own working directory: they get absolute paths.
    const model = {
      ...start.model,
      checkpointDir: resolve(start.model.checkpointDir),
      chatFormatDir: start.model.chatFormatDir && resolve(start.model.chatFormatDir),
    };
    if (stop.signal.aborted) throw new RunStopped('stopped before the services started');

    // 4. This run's database, topics, directories and admin token.
    const runId = `stack-${new Date().toISOString().replace(/[:.]/g, '-')}-${randomUUID().slice(0, 6)}`;
    const runDir = join(dataDir, 'runs', runId);
    const logDir = join(runDir, 'logs');
    const checkpointDir = join(runDir, 'checkpoints');
    mkdirSync(logDir, { recursive: true });
    mkdirSync(checkpointDir, { recursive: true });
    const database = runDatabaseName(runId);
    const infrastructure: RunInfrastructure = {
      kafkaBrokers: brokers,
      databaseUrl: await createRunDatabase(serverUrl, database),
      topicPrefix: `${runId}.`,
    };
    // The admin token is generated per run and handed to the gateway and the rollout-manager in their environments only: never printed or written down.
    const wiring: RunWiring = { runId, model, adminToken: randomBytes(24).toString('hex'), checkpointDir };
    const serviceOf = (app: App) => {
      const s = services.find((x) => x.app === app);
      if (!s) throw new Error(`${app} is not running`);
      return s;
    };
    saveState({
      runId,
      driverPid: process.pid,
      phase: 'starting',
      infra,
      kafkaBrokers: brokers,
      database,
      topicPrefix: infrastructure.topicPrefix,
      runDir,
      services: [],
      report: null,
      startedAt: new Date().toISOString(),
    });
    console.log(`run ${runId}: starting the five services (logs in ${logDir})`);

    // 5. The services, each its own process.
    run.spawning = true;
    const urls: Partial<Record<App, string>> = {};
    for (const wave of START_WAVES) {
      const started = await Promise.all(
        wave.map((app) => startServiceProcess(app, serviceEnv(app, cfg, wiring, infrastructure, urls), join(logDir, `${app}.log`))),
      );
      for (const s of started) {
        services.push(s);
        urls[s.app] = s.url;
      }
      update({ services: services.map(handleOf) });
      if (stop.signal.aborted) throw new RunStopped('stopped while the services started');
    }
    await Promise.all(services.map((s) => waitReady(s)));
    for (const s of services) console.log(`  ${s.app.padEnd(16)} pid ${String(s.pid).padEnd(7)} ${s.url}`);
    update({ phase: 'running' });

    // 6. The run, by the same driver as `anvil train`, over the services' HTTP APIs and Kafka.
    bus = createBus({ kind: 'kafka', brokers: brokers.split(','), clientId: 'anvil-run-driver', topicPrefix: infrastructure.topicPrefix });
    const runServices = await connectDistributedServices({
      rolloutManager: new RolloutManagerClient(serviceOf('rollout-manager').url),
      trainer: new TrainerClient(serviceOf('trainer').url),
      bus,
      runDir,
      checkpointsDir: checkpointDir,
      log: (l) => console.log(l),
    });
    const startedAt = performance.now();
    let outcome: Awaited<ReturnType<typeof trainRun>>;
    try {
      outcome = await trainRun({
        cfg,
        runId,
        services: runServices,
        taskSet: taskSetOf(cfg),
        wall: () => (performance.now() - startedAt) / 1000,
        log: (l) => console.log(l),
        title: `Anvil distributed run ${runId}`,
        warmStart: start.warmStart,
        startName: cfg.model !== 'tiny' && cfg.warmStart.enabled !== true ? 'the starting weights' : 'the warm start',
        signal: stop.signal,
        extraSummary: { runId, runDir, database, topicPrefix: infrastructure.topicPrefix },
      });
    } finally {
      await runServices.close();
    }
    update({ report: outcome.report });

    // 7. Done: the services stop (or stay up with --keep-services until `down`).
    if (opts.keepServices) {
      for (const s of services) s.child.unref();
      update({ phase: 'finished' });
      console.log('the services keep running (--keep-services): `anvil stack status` lists them, `anvil stack down` stops them');
    } else {
      await stopServices();
      update({ phase: 'finished', services: [] });
    }
    console.log(JSON.stringify(outcome.summary));
    return outcome.exitCode;
  } catch (err) {
    const stopped = err instanceof RunStopped || stop.signal.aborted;
    if (!stopped) {
      console.error(`\nthe run failed: ${(err as Error).stack ?? err}`);
      for (const s of services) console.error(`--- the end of ${s.logFile}:\n${tail(s.logFile, 8)}`);
    }
    await stopServices();
    update({ phase: stopped ? 'stopped' : 'failed', services: [] });
    return stopped ? EXIT.interrupted : EXIT.failed;
  } finally {
    await bus?.close().catch(() => undefined);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

const handleOf = (s: RunningService) => ({ app: s.app, pid: s.pid, port: s.port, url: s.url, logFile: s.logFile });

/** Stops the services wave by wave (STOP_WAVES); says which did not stop cleanly. */
async function stopAll(services: RunningService[], onStopped: (left: ReturnType<typeof handleOf>[]) => void): Promise<void> {
  for (const wave of STOP_WAVES) {
    const group = services.filter((s) => wave.includes(s.app));
    const codes = await Promise.all(group.map((s) => stopProcess(s.pid, STOP_TIMEOUT_MS, s.exited)));
    group.forEach((s, i) => {
      if (codes[i] !== 0)
        console.log(
          `${s.app} did not stop cleanly (${codes[i] === 'killed' ? `killed after ${STOP_TIMEOUT_MS / 1000} s` : `exit ${codes[i]}`}); see ${s.logFile}`,
        );
    });
    onStopped(services.filter((s) => alive(s.pid)).map(handleOf));
  }
}
