/**
 * The in-process adapter of the run driver's port: all five services in this one process, on ONE
 * in-process bus (Kafka's semantics) and ONE embedded PostgreSQL (PGlite on a worker thread of its
 * own), from the same settings the distributed stack hands its processes (config/service-settings:
 * each service's own environment schema validates them here too). The inference-proxy, the Data
 * Pool and the gateway run their Nest modules on loopback ports, exactly as deployed; the
 * rollout-manager and the trainer run their Nest-free runtimes (the classes their services wrap),
 * which the driver calls directly. Every LLM call of every rollout goes agent -> gateway (HTTP,
 * token-exact capture) -> inference-proxy (embedded engine), every record and batch through the bus,
 * every trajectory through the Data Pool's tables.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Model } from '@anvil/engine';
import { GatewayModule, gatewayEnv } from '@anvil/gateway';
import { InferenceProxyModule, inferenceProxyEnv } from '@anvil/inference-proxy';
import { MiddlewareModule, middlewareEnv } from '@anvil/middleware';
import { createLogger, type Logger } from '@anvil/observability';
import { pgliteThreadOf } from '@anvil/persistence';
import { RolloutRuntime, rolloutManagerEnv, rolloutRuntimeConfigOf } from '@anvil/rollout-manager';
import { createSharedInfra, hostedServiceContext, startHostedService, type HostedService, type SharedInfra } from '@anvil/service-kit';
import {
  CheckpointStore,
  loadTrainerModels,
  PostgresBatchSource,
  trainerEnv,
  trainerOptionsOf,
  TrainerRuntime,
  type TrainerStepEvent,
} from '@anvil/trainer';
import type { RunConfig } from '../../config/run-config';
import { serviceSettings, type App, type Env, type RunModel, type RunWiring } from '../../config/service-settings';
import type { CompletedRollout, RunServices } from '../services';

export interface InProcessOptions {
  runId: string;
  model: RunModel;
  logLevel?: 'error' | 'warn' | 'info';
  /** The train/inference mismatch split the trainer reports under (the run's context manager and agent kind). */
  mismatchSplit?: string;
}

/** The in-process services, with handles on what benches and tests look at beyond the port. */
export interface InProcessServices extends RunServices {
  infra: SharedInfra;
  gateway: HostedService;
  proxy: HostedService;
  dataPool: HostedService;
  rollouts: RolloutRuntime;
  trainer: TrainerRuntime;
  model: Model;
  runId: string;
}

export async function startInProcessServices(cfg: RunConfig, opts: InProcessOptions): Promise<InProcessServices> {
  const logLevel = opts.logLevel ?? 'error';
  const logger: Logger = createLogger({ service: 'anvil', level: logLevel });
  const runDir = join(cfg.dataDir, 'runs', opts.runId);
  const checkpointsDir = join(runDir, 'checkpoints');
  mkdirSync(runDir, { recursive: true });
  // PGlite on a worker thread unless ANVIL_PGLITE_THREAD says otherwise: on this one process's main
  // thread its statements take about half of the RL phase's time.
  const infra = await createSharedInfra({
    databaseUrl: `pglite://${join(runDir, 'db')}`,
    pgliteThread: pgliteThreadOf(process.env, 'worker'),
  });
  const wiring: RunWiring = {
    runId: opts.runId,
    model: opts.model,
    adminToken: randomBytes(24).toString('hex'),
    checkpointDir: checkpointsDir,
  };
  const urls: Partial<Record<App, string>> = {};
  const settings = (app: App): Env => ({ PORT: '0', LOG_LEVEL: logLevel, ...serviceSettings(app, cfg, wiring, urls) });
  const started: HostedService[] = [];
  const disposers: (() => void)[] = [];
  try {
    const proxyCtx = hostedServiceContext(
      'inference-proxy',
      inferenceProxyEnv,
      { ...settings('inference-proxy'), DEPLOYMENT_NAME: 'embedded' },
      infra,
    );
    const proxy = await startHostedService(proxyCtx, InferenceProxyModule.forRoot(proxyCtx));
    started.push(proxy);
    urls['inference-proxy'] = proxy.url;
    const poolCtx = hostedServiceContext('middleware', middlewareEnv, settings('middleware'), infra);
    const dataPool = await startHostedService(poolCtx, MiddlewareModule.forRoot(poolCtx));
    started.push(dataPool);
    const gatewayCtx = hostedServiceContext('gateway', gatewayEnv, settings('gateway'), infra);
    const gateway = await startHostedService(gatewayCtx, GatewayModule.forRoot(gatewayCtx), {
      bodyLimitBytes: gatewayCtx.config.MAX_REQUEST_BYTES,
    });
    started.push(gateway);
    urls.gateway = gateway.url;
    for (const s of started) await waitReady(s);

    const trainerConfig = hostedServiceContext('trainer', trainerEnv, settings('trainer'), infra).config;
    // The trainer's own construction (starting weights, AdamW, LoRA adapters, the KL penalty's reference), as its service builds it.
    const { model, reference } = await loadTrainerModels({
      ...trainerConfig,
      TRAINER_INITIAL_CHECKPOINT_DIR: trainerConfig.TRAINER_INITIAL_CHECKPOINT_DIR ?? opts.model.checkpointDir,
    });
    disposers.push(() => model.dispose());
    if (reference) disposers.push(() => reference.dispose());
    const options = trainerOptionsOf(trainerConfig);
    const stepListeners: ((e: TrainerStepEvent, atMs: number) => void)[] = [];
    const split = opts.mismatchSplit;
    const trainer = new TrainerRuntime(options, {
      bus: infra.bus,
      model,
      store: new CheckpointStore(trainerConfig.CHECKPOINT_DIR, {
        keepPublished: trainerConfig.CHECKPOINT_KEEP_PUBLISHED,
        keepFull: trainerConfig.CHECKPOINT_KEEP_FULL,
        ...(trainerConfig.TRAINER_TOKENIZER_DIR ? { tokenizerDir: trainerConfig.TRAINER_TOKENIZER_DIR } : {}),
      }),
      batches: new PostgresBatchSource(infra.dataSource),
      logger: logger.child({ component: 'trainer' }),
      onStep: (e) => {
        const at = Date.now();
        for (const fn of stepListeners) fn(e, at);
      },
      ...(split ? { splitOf: () => split } : {}),
      ...(reference ? { reference } : {}),
    });
    const rolloutConfig = hostedServiceContext('rollout-manager', rolloutManagerEnv, settings('rollout-manager'), infra).config;
    const rollouts = new RolloutRuntime({
      gatewayUrl: gateway.url,
      adminToken: rolloutConfig.GATEWAY_ADMIN_TOKEN,
      bus: infra.bus,
      dataSource: infra.dataSource,
      config: rolloutRuntimeConfigOf(rolloutConfig),
      logger: logger.child({ component: 'rollout-manager' }),
    });
    await rollouts.start();
    let trainingStarted = false;
    return {
      deployment: 'in-process',
      runDir,
      checkpointsDir,
      infra,
      proxy,
      dataPool,
      gateway,
      rollouts,
      trainer,
      model,
      runId: opts.runId,
      tasks: {
        loadBuiltin: (spec) => rollouts.loadBuiltin(spec),
        loadJsonl: (spec, jsonl, source) => rollouts.loadJsonl(spec, jsonl, source),
      },
      submit: async (pass) => void (await rollouts.submit(pass)),
      rolloutState: async () => rollouts.snapshot(),
      evaluate: (req) => rollouts.runEvaluation(req),
      startTraining: async () => {
        if (trainingStarted) return;
        trainingStarted = true;
        await trainer.start();
      },
      pauseTraining: async () => {
        await trainer.pause();
        return trainer.currentVersion;
      },
      resumeTraining: async () => trainer.resume(),
      trainerState: async () => ({
        version: trainer.currentVersion,
        done: trainer.done,
        failure: trainer.failure?.message ?? null,
        busyMs: trainer.totals.busyMs,
      }),
      onStep: (fn) => void stepListeners.push(fn),
      onRolloutCompleted: (fn: (r: CompletedRollout) => void) => rollouts.onRolloutCompleted(fn),
      flushSteps: async () => undefined,
      stopRollouts: () => rollouts.stop(0),
      async close() {
        await rollouts.stop(0).catch((e: unknown) => logger.warn('rollout-manager stop failed', { err: e }));
        await trainer.stop().catch((e: unknown) => logger.warn('trainer stop failed', { err: e }));
        for (const s of [...started].reverse()) await s.close().catch((e: unknown) => logger.warn(`${s.service} close failed`, { err: e }));
        await infra.close();
        for (const d of disposers) d();
      },
    };
  } catch (err) {
    for (const s of started.reverse()) await s.close().catch(() => undefined);
    await infra.close().catch(() => undefined);
    for (const d of disposers) d();
    throw err;
  }
}

async function waitReady(s: HostedService): Promise<void> {
  const deadline = Date.now() + 120_000;
  let last = '';
  while (Date.now() < deadline) {
    try {
      const r = await fetch(`${s.url}/readyz`);
      if (r.status === 200) return;
      last = `${r.status} ${await r.text()}`;
    } catch (e) {
      last = (e as Error).message;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${s.service} did not become ready within 120 s: ${last}`);
}
