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
import {
  serviceEnv,
  START_WAVES,
  STOP_WAVES,
  type App,
  type RunInfrastructure,
  type RunModel,
  type RunWiring,
} from '../config/service-settings';
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
  if (Boolean(opts.brokers) !== Boolean(opts.database)) {
    console.error('--brokers and --database go together (existing infrastructure); leave both out to start Kafka and PostgreSQL locally');
    return EXIT.usage;
  }
  const dataDir = resolve(opts.cfg.dataDir);
  const previous = readState(dataDir);
  if (previous && liveRun(previous)) {
    console.error(
      `a stack run is up already (${previous.runId}, driver pid ${previous.driverPid}): \`anvil stack status\` shows it, \`anvil stack down\` stops it`,
    );
    return EXIT.failed;
  }
  return new StackUp(opts, dataDir).run();
}

/** A run's infrastructure, where it came from, and its own database and topics. */
interface StackInfra {
  brokers: string;
  serverUrl: string;
  kind: StackState['infra'];
}

/** One `anvil stack up`: its phases, its services, its state file, and its stop on a signal. */
class StackUp {
  private readonly stop = new AbortController();
  private readonly services: RunningService[] = [];
  private state: StackState | null = null;
  private stopping: Promise<void> | null = null;
  /** Once the services are being spawned, a stop must unwind through them. */
  private spawning = false;
  private firstSignalAt = 0;
  private readonly onSignal = (sig: NodeJS.Signals) => this.signalled(sig);

  constructor(
    private readonly opts: UpOptions,
    private readonly dataDir: string,
  ) {}

  async run(): Promise<number> {
    process.on('SIGINT', this.onSignal);
    process.on('SIGTERM', this.onSignal);
    let bus: MessageBus | null = null;
    try {
      const infra = await this.infrastructure();
      this.buildIfStale();
      const start = await startingModel(this.opts.cfg, (l) => console.log(l));
      if (this.stop.signal.aborted) throw new RunStopped('stopped before the services started');
      const prepared = await this.prepareRun(infra, start.model);
      await this.startServices(prepared);
      bus = createBus({
        kind: 'kafka',
        brokers: infra.brokers.split(','),
        clientId: 'anvil-run-driver',
        topicPrefix: prepared.infrastructure.topicPrefix,
      });
      const outcome = await this.drive(prepared, bus, start.warmStart);
      await this.finish();
      console.log(JSON.stringify(outcome.summary));
      return outcome.exitCode;
    } catch (err) {
      const stopped = err instanceof RunStopped || this.stop.signal.aborted;
      if (!stopped) {
        console.error(`\nthe run failed: ${(err as Error).stack ?? err}`);
        for (const s of this.services) console.error(`--- the end of ${s.logFile}:\n${tail(s.logFile, 8)}`);
      }
      await this.stopServices();
      this.update({ phase: stopped ? 'stopped' : 'failed', services: [] });
      return stopped ? EXIT.interrupted : EXIT.failed;
    } finally {
      await bus?.close().catch(() => undefined);
      process.off('SIGINT', this.onSignal);
      process.off('SIGTERM', this.onSignal);
    }
  }

  /** Kafka and PostgreSQL: the user's (--brokers/--database), or local ones (installed on first use). */
  private async infrastructure(): Promise<StackInfra> {
    if (this.opts.brokers && this.opts.database) return { brokers: this.opts.brokers, serverUrl: this.opts.database, kind: 'external' };
    console.log('infrastructure: Kafka and PostgreSQL (tools/infra; installed on first use) ...');
    const { startStack } = await import('@anvil/infra');
    const s = await startStack({});
    return { brokers: s.brokers, serverUrl: s.url, kind: 'local' };
  }

  private buildIfStale(): void {
    const stale = this.opts.build ? staleDist() : null;
    if (!stale) return;
    console.log(`building dist/ (${stale}) ...`);
    build();
  }

  /** This run's id, directories, database, topics, admin token and state file. */
  private async prepareRun(infra: StackInfra, startModel: RunModel) {
    const runId = `stack-${new Date().toISOString().replace(/[:.]/g, '-')}-${randomUUID().slice(0, 6)}`;
    const runDir = join(this.dataDir, 'runs', runId);
    const logDir = join(runDir, 'logs');
    const checkpointDir = join(runDir, 'checkpoints');
    mkdirSync(logDir, { recursive: true });
    mkdirSync(checkpointDir, { recursive: true });
    const database = runDatabaseName(runId);
    const infrastructure: RunInfrastructure = {
      kafkaBrokers: infra.brokers,
      databaseUrl: await createRunDatabase(infra.serverUrl, database),
      topicPrefix: `${runId}.`,
    };
    // The services run with their own working directory: they get absolute paths.
    const model: RunModel = {
      ...startModel,
      checkpointDir: resolve(startModel.checkpointDir),
      chatFormatDir: startModel.chatFormatDir && resolve(startModel.chatFormatDir),
    };
    // The admin token is generated per run and handed to the gateway and the rollout-manager in their environments only: never printed or written down.
    const wiring: RunWiring = { runId, model, adminToken: randomBytes(24).toString('hex'), checkpointDir };
    this.saveState({
      runId,
      driverPid: process.pid,
      phase: 'starting',
      infra: infra.kind,
      kafkaBrokers: infra.brokers,
      database,
      topicPrefix: infrastructure.topicPrefix,
      runDir,
      services: [],
      report: null,
      startedAt: new Date().toISOString(),
    });
    return { runId, runDir, logDir, checkpointDir, database, infrastructure, wiring };
  }

  /** The five services, each its own process, wave by wave (each after those whose address it needs). */
  private async startServices(p: Awaited<ReturnType<StackUp['prepareRun']>>): Promise<void> {
    console.log(`run ${p.runId}: starting the five services (logs in ${p.logDir})`);
    this.spawning = true;
    const urls: Partial<Record<App, string>> = {};
    for (const wave of START_WAVES) {
      const started = await Promise.all(
        wave.map((app) =>
          startServiceProcess(app, serviceEnv(app, this.opts.cfg, p.wiring, p.infrastructure, urls), join(p.logDir, `${app}.log`)),
        ),
      );
      for (const s of started) {
        this.services.push(s);
        urls[s.app] = s.url;
      }
      this.update({ services: this.services.map(handleOf) });
      if (this.stop.signal.aborted) throw new RunStopped('stopped while the services started');
    }
    await Promise.all(this.services.map((s) => waitReady(s)));
    for (const s of this.services) console.log(`  ${s.app.padEnd(16)} pid ${String(s.pid).padEnd(7)} ${s.url}`);
    this.update({ phase: 'running' });
  }

  /** The run, by the same driver as `anvil train`, over the services' HTTP APIs and Kafka. */
  private async drive(p: Awaited<ReturnType<StackUp['prepareRun']>>, bus: MessageBus, warmStart: Record<string, unknown>) {
    const { cfg } = this.opts;
    const runServices = await connectDistributedServices({
      rolloutManager: new RolloutManagerClient(this.serviceOf('rollout-manager').url),
      trainer: new TrainerClient(this.serviceOf('trainer').url),
      bus,
      runDir: p.runDir,
      checkpointsDir: p.checkpointDir,
      log: (l) => console.log(l),
    });
    const startedAt = performance.now();
    try {
      const outcome = await trainRun({
        cfg,
        runId: p.runId,
        services: runServices,
        taskSet: taskSetOf(cfg),
        wall: () => (performance.now() - startedAt) / 1000,
        log: (l) => console.log(l),
        title: `Anvil distributed run ${p.runId}`,
        warmStart,
        startName: cfg.model !== 'tiny' && cfg.warmStart.enabled !== true ? 'the starting weights' : 'the warm start',
        signal: this.stop.signal,
        extraSummary: { runId: p.runId, runDir: p.runDir, database: p.database, topicPrefix: p.infrastructure.topicPrefix },
      });
      this.update({ report: outcome.report });
      return outcome;
    } finally {
      await runServices.close();
    }
  }

  /** Done: the services stop (or stay up with --keep-services until `down`). */
  private async finish(): Promise<void> {
    if (this.opts.keepServices) {
      for (const s of this.services) s.child.unref();
      this.update({ phase: 'finished' });
      console.log('the services keep running (--keep-services): `anvil stack status` lists them, `anvil stack down` stops them');
    } else {
      await this.stopServices();
      this.update({ phase: 'finished', services: [] });
    }
  }

  private serviceOf(app: App): RunningService {
    const s = this.services.find((x) => x.app === app);
    if (!s) throw new Error(`${app} is not running`);
    return s;
  }

  private saveState(s: StackState): void {
    this.state = s;
    writeState(this.dataDir, s);
  }

  private update(over: Partial<StackState>): void {
    if (this.state) this.saveState({ ...this.state, ...over });
  }

  private async stopServices(): Promise<void> {
    await (this.stopping ??= stopAll(this.services, (left) => this.update({ services: left })));
    // Services that were still starting when a stop began (Ctrl-C during start-up).
    const late = this.services.filter((s) => alive(s.pid));
    if (late.length) await stopAll(late, (left) => this.update({ services: left }));
  }

  private signalled(sig: NodeJS.Signals): void {
    const now = Date.now();
    if (!this.stop.signal.aborted) {
      this.firstSignalAt = now;
      console.log(
        `\n${sig}: stopping the run and the services (each drains its in-flight work; the same signal again after a few seconds kills them)`,
      );
      this.stop.abort();
      this.update({ phase: 'stopping' });
      // Before any service is spawned there is nothing to stop; once they are, the start path unwinds and stops them.
      if (!this.spawning) process.exit(EXIT.interrupted);
      void this.stopServices();
      return;
    }
    // npm and tsx may relay the terminal's one Ctrl-C a second time: only a later one means "now".
    if (now - this.firstSignalAt < 3_000) return;
    console.log(`${sig} again: killing the services`);
    for (const s of this.services) if (alive(s.pid)) process.kill(s.pid, 'SIGKILL');
    process.exit(EXIT.interrupted);
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
