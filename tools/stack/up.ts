/**
 * `npm run stack -- up`: the distributed run in the foreground. Starts Kafka and PostgreSQL
 * (tools/infra, installed on first use; or uses --brokers/--database), builds dist/ when it is
 * stale, builds or finds the warm start, starts the five services as their own processes (logs to
 * <runDir>/logs/<service>.log), drives the run (drive.ts), writes the report, stops the services
 * and prints the JSON summary as its last line. Ctrl-C (or `down`) stops the services gracefully.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createBus, type MessageBus } from '@anvil/messaging';
import { chainAddConfigOf, loadRunConfigOrExit } from '../embedded/run-config';
import { warmStart } from '../embedded/warm-start';
import { RolloutManagerClient, TrainerClient } from './clients';
import { build, staleDist } from './dist-freshness';
import { driveRun, RunStopped } from './drive';
import { createRunDatabase, runDatabaseName } from './run-database';
import { serviceEnv, START_WAVES, STOP_WAVES, type App, type RunWiring } from './service-env';
import { alive, startServiceProcess, STOP_TIMEOUT_MS, stopProcess, tail, waitReady, type RunningService } from './service-process';
import { liveRun, readState, writeState, type StackState } from './stack-state';

interface UpOptions {
  brokers?: string;
  database?: string;
  keepServices: boolean;
  build: boolean;
  rest: string[];
}

function parseUpArgs(argv: string[]): UpOptions {
  const o: UpOptions = { keepServices: false, build: true, rest: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--brokers') o.brokers = argv[++i];
    else if (a === '--database') o.database = argv[++i];
    else if (a === '--keep-services') o.keepServices = true;
    else if (a === '--no-build') o.build = false;
    else o.rest.push(a);
  }
  return o;
}

export async function up(argv: string[]): Promise<number> {
  const opts = parseUpArgs(argv);
  const cfg = loadRunConfigOrExit(opts.rest, process.env);
  if (cfg.model !== 'tiny' || cfg.task.set !== 'chain-add') {
    console.error('the stack runs the built-in model and task set (model "tiny", task.set "chain-add"), as the embedded job does');
    return 78;
  }
  if (Boolean(opts.brokers) !== Boolean(opts.database)) {
    console.error('--brokers and --database go together (existing infrastructure); leave both out to start Kafka and PostgreSQL locally');
    return 2;
  }
  const dataDir = resolve(cfg.dataDir);
  const previous = readState(dataDir);
  if (previous && liveRun(previous)) {
    console.error(
      `a stack run is up already (${previous.runId}, driver pid ${previous.driverPid}): \`npm run stack -- status\` shows it, \`npm run stack -- down\` stops it`,
    );
    return 1;
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
      const { startStack } = await import('../infra/lib.mjs');
      const s = await startStack({});
      [brokers, serverUrl, infra] = [s.brokers, s.url, 'local'];
    }
    // 2. The services' build.
    const stale = opts.build ? staleDist() : null;
    if (stale) {
      console.log(`building dist/ (${stale}) ...`);
      build();
    }
    // 3. The warm start: the same cached checkpoint the embedded job starts from.
    const ws = await warmStart({ ...cfg.warmStart, task: chainAddConfigOf(cfg), dataDir }, (l) => console.log(l));
    console.log(
      `warm start: ${ws.cached ? 'cached' : 'built'} ${ws.dir} (seed ${cfg.warmStart.seed}, ${ws.steps} SFT steps x ${cfg.warmStart.tasksPerStep} demonstrations${ws.cached ? '' : `, ${ws.seconds.toFixed(0)} s`})`,
    );
    if (stop.signal.aborted) throw new RunStopped('stopped before the services started');

    // 4. This run's database, topics, directories and admin token.
    const runId = `stack-${new Date().toISOString().replace(/[:.]/g, '-')}-${randomUUID().slice(0, 6)}`;
    const runDir = join(dataDir, 'runs', runId);
    const logDir = join(runDir, 'logs');
    const checkpointDir = join(runDir, 'checkpoints');
    mkdirSync(logDir, { recursive: true });
    mkdirSync(checkpointDir, { recursive: true });
    const database = runDatabaseName(runId);
    const wiring: RunWiring = {
      runId,
      kafkaBrokers: brokers,
      databaseUrl: await createRunDatabase(serverUrl, database),
      topicPrefix: `${runId}.`,
      // Generated per run, handed to the gateway and the rollout-manager in their environments only: never printed or written down.
      adminToken: randomBytes(24).toString('hex'),
      initialCheckpointDir: resolve(ws.dir),
      checkpointDir,
    };
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
      topicPrefix: wiring.topicPrefix,
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
        wave.map((app) => startServiceProcess(app, serviceEnv(app, cfg, wiring, urls), join(logDir, `${app}.log`))),
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

    // 6. The run.
    bus = createBus({ kind: 'kafka', brokers: brokers.split(','), clientId: 'anvil-stack-driver', topicPrefix: wiring.topicPrefix });
    const { summary, report } = await driveRun({
      cfg,
      runId,
      rolloutManager: new RolloutManagerClient(serviceOf('rollout-manager').url),
      trainer: new TrainerClient(serviceOf('trainer').url),
      bus,
      warmStart: {
        cached: ws.cached,
        seconds: Number(ws.seconds.toFixed(1)),
        seed: cfg.warmStart.seed,
        sftSteps: ws.steps,
        demonstrations: ws.demonstrations,
        dir: ws.dir,
      },
      checkpointDir,
      signal: stop.signal,
      extraSummary: { deployment: 'distributed', runId, runDir, database, topicPrefix: wiring.topicPrefix },
    });
    update({ report });

    // 7. Done: the services stop (or stay up with --keep-services until `down`).
    if (opts.keepServices) {
      for (const s of services) s.child.unref();
      update({ phase: 'finished' });
      console.log('the services keep running (--keep-services): `npm run stack -- status` lists them, `npm run stack -- down` stops them');
    } else {
      await stopServices();
      update({ phase: 'finished', services: [] });
    }
    console.log(JSON.stringify(summary));
    return 0;
  } catch (err) {
    const stopped = err instanceof RunStopped || stop.signal.aborted;
    if (!stopped) {
      console.error(`\nthe run failed: ${(err as Error).stack ?? err}`);
      for (const s of services) console.error(`--- the end of ${s.logFile}:\n${tail(s.logFile, 8)}`);
    }
    await stopServices();
    update({ phase: stopped ? 'stopped' : 'failed', services: [] });
    return stopped ? 130 : 1;
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
