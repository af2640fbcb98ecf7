/**
 * The embedded default's one process: all five services on ONE in-process bus (Kafka's semantics)
 * and ONE PGlite database, built by @anvil/service-kit's createSharedInfra. The inference-proxy,
 * the Data Pool (middleware) and the gateway run their own Nest modules on loopback ports, exactly
 * as in the distributed deployment; the rollout-manager and the trainer run their Nest-free
 * runtimes (the same classes their services wrap). Every LLM call of every rollout goes
 * agent -> gateway (HTTP, token-exact capture) -> inference-proxy (embedded engine), every record
 * and batch through the bus, every trajectory through the Data Pool's tables.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Model } from '@anvil/engine';
import { createLogger, type Logger } from '@anvil/observability';
import { pgliteThreadOf } from '@anvil/persistence';
import { createSharedInfra, hostedServiceContext, startHostedService, type HostedService, type SharedInfra } from '@anvil/service-kit';
import { GatewayModule, gatewayEnv } from '@anvil/gateway';
import { InferenceProxyModule, inferenceProxyEnv } from '@anvil/inference-proxy';
import { MiddlewareModule, middlewareEnv } from '@anvil/middleware';
import { RolloutRuntime } from '@anvil/rollout-manager';
import { PostgresBatchSource, CheckpointStore, TrainerRuntime, type TrainerStepEvent } from '@anvil/trainer';
import { knobEnvs } from '../stack/service-env';
import { lossConfigOf, type RunConfig } from './run-config';

export interface EmbeddedLoop {
  infra: SharedInfra;
  proxy: HostedService;
  dataPool: HostedService;
  gateway: HostedService;
  rollouts: RolloutRuntime;
  trainer: TrainerRuntime;
  model: Model;
  runId: string;
  runDir: string;
  /** Where the trainer writes every published version (Hugging Face directories, the tokenizer files copied in for a user's model). */
  checkpointsDir: string;
  close(): Promise<void>;
}

/** The starting weights of a run and how the gateway serves them. */
export interface LoopModel {
  /** A Hugging Face checkpoint directory (config.json + safetensors): the proxy serves it, the trainer starts from it. */
  checkpointDir: string;
  /** The directory of its tokenizer.json and chat template (a user's model), or null for the tiny model's byte tokenizer and ChatML template. */
  chatFormatDir: string | null;
  /** The model name the gateway serves (what agents' requests name). */
  servedName: string;
}

export async function startEmbeddedLoop(
  cfg: RunConfig,
  opts: {
    model: LoopModel;
    runId: string;
    logLevel?: 'error' | 'warn' | 'info';
    onStep?: (e: TrainerStepEvent) => void;
    onFatal?: (e: Error) => void;
    splitOf?: () => string;
  },
): Promise<EmbeddedLoop> {
  const logLevel = opts.logLevel ?? 'error';
  const logger: Logger = createLogger({ service: 'main', level: logLevel });
  const runDir = join(cfg.dataDir, 'runs', opts.runId);
  const checkpointsDir = join(runDir, 'checkpoints');
  mkdirSync(runDir, { recursive: true });
  // PGlite on a worker thread unless ANVIL_PGLITE_THREAD says otherwise: on this one process's main
  // thread its statements took 48% of the RL phase's time (README, "PGlite on its own thread").
  const infra = await createSharedInfra({
    databaseUrl: `pglite://${join(runDir, 'db')}`,
    pgliteThread: pgliteThreadOf(process.env, 'worker'),
  });
  const started: HostedService[] = [];
  const adminToken = randomBytes(24).toString('hex');
  const env = (over: Record<string, string>) => ({ PORT: '0', LOG_LEVEL: logLevel, ...over });
  try {
    const proxyCtx = hostedServiceContext(
      'inference-proxy',
      inferenceProxyEnv,
      env({
        INFERENCE_BACKEND: 'embedded',
        EMBEDDED_CHECKPOINT_DIR: opts.model.checkpointDir,
        DEPLOYMENT_NAME: 'embedded',
        EMBEDDED_MAX_BATCH: String(cfg.rollouts.concurrency),
        MAX_IN_FLIGHT_PER_REPLICA: String(cfg.rollouts.concurrency * 2),
      }),
      infra,
    );
    const proxy = await startHostedService(proxyCtx, InferenceProxyModule.forRoot(proxyCtx));
    started.push(proxy);
    const poolCtx = hostedServiceContext('middleware', middlewareEnv, env(dataPoolEnv(cfg, opts.runId)), infra);
    const dataPool = await startHostedService(poolCtx, MiddlewareModule.forRoot(poolCtx));
    started.push(dataPool);
    const chatFormat: Record<string, string> = opts.model.chatFormatDir
      ? { GATEWAY_CHAT_FORMAT: 'hf', GATEWAY_TOKENIZER_DIR: opts.model.chatFormatDir }
      : {};
    const gatewayCtx = hostedServiceContext(
      'gateway',
      gatewayEnv,
      env({
        GATEWAY_ADMIN_TOKEN: adminToken,
        INFERENCE_PROXY_URL: proxy.url,
        MAX_STALENESS: String(cfg.rollouts.eta),
        GATEWAY_MODEL_NAME: opts.model.servedName,
        ...chatFormat,
      }),
      infra,
    );
    const gateway = await startHostedService(gatewayCtx, GatewayModule.forRoot(gatewayCtx), {
      bodyLimitBytes: gatewayCtx.config.MAX_REQUEST_BYTES,
    });
    started.push(gateway);
    for (const s of started) await waitReady(s);

    const model = await Model.load(opts.model.checkpointDir);
    const a = cfg.algorithm;
    model.configureOptimizer({ beta1: a.beta1, beta2: a.beta2, eps: a.eps, weightDecay: a.weightDecay ?? 0 });
    // The KL penalty's reference: the starting weights, a second copy that is never trained.
    const reference = a.klCoef > 0 ? await Model.load(opts.model.checkpointDir) : null;
    const trainer = new TrainerRuntime(
      {
        runId: opts.runId,
        settings: {
          loss: lossConfigOf(cfg),
          lr: a.lr,
          warmupSteps: a.warmupSteps,
          decaySteps: a.lrSchedule === 'cosine' ? cfg.budget.steps * a.miniBatches : 0,
          minLrFactor: a.minLrFactor,
          maxGradNorm: a.maxGradNorm,
          packTokens: a.packTokens ?? 65_536,
          miniBatches: a.miniBatches,
        },
        publishEvery: 1,
        checkpointEvery: cfg.checkpointEvery,
        maxNonFiniteSkips: 5,
        initialVersion: 0,
        maxBatches: cfg.budget.steps,
        group: 'anvil.trainer',
      },
      {
        bus: infra.bus,
        model,
        store: new CheckpointStore(checkpointsDir, opts.model.chatFormatDir ? { tokenizerDir: opts.model.chatFormatDir } : {}),
        batches: new PostgresBatchSource(infra.dataSource),
        logger: logger.child({ component: 'trainer' }),
        onStep: opts.onStep,
        onFatal: opts.onFatal,
        splitOf: opts.splitOf,
        ...(reference ? { reference } : {}),
      },
    );
    const rollouts = new RolloutRuntime({
      gatewayUrl: gateway.url,
      adminToken,
      bus: infra.bus,
      dataSource: infra.dataSource,
      config: {
        model: gatewayCtx.config.GATEWAY_MODEL_NAME,
        groupSize: cfg.rollouts.groupSize,
        concurrency: cfg.rollouts.concurrency,
        eta: cfg.rollouts.eta,
        groupsPerStep: cfg.scheduler.groupsPerBatch,
        initialPolicyVersion: 0,
        admissionPollMs: 100,
      },
      logger: logger.child({ component: 'rollout-manager' }),
    });
    await rollouts.start();
    return {
      infra,
      proxy,
      dataPool,
      gateway,
      rollouts,
      trainer,
      model,
      runId: opts.runId,
      runDir,
      checkpointsDir,
      async close() {
        await rollouts.stop(0).catch((e: unknown) => logger.warn('rollout-manager stop failed', { err: e }));
        await trainer.stop().catch((e: unknown) => logger.warn('trainer stop failed', { err: e }));
        for (const s of [...started].reverse()) await s.close().catch((e: unknown) => logger.warn(`${s.service} close failed`, { err: e }));
        await infra.close();
        model.dispose();
        reference?.dispose();
      },
    };
  } catch (err) {
    for (const s of started.reverse()) await s.close().catch(() => undefined);
    await infra.close().catch(() => undefined);
    throw err;
  }
}

/** The Data Pool's knobs for this run, as the distributed stack sets them (its env schema validates them). */
function dataPoolEnv(cfg: RunConfig, runId: string): Record<string, string> {
  return { DATA_POOL_RUN_ID: runId, ...knobEnvs(cfg).middleware };
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
