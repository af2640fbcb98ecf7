/**
 * The one place a run configuration becomes the five services' settings: each knob turned into
 * the environment variable of the service that owns it (each service validates its own at start,
 * with every problem listed at once). Both ways to run take their settings from here: the
 * in-process host parses these variables with each service's own schema and builds the services
 * from them, the distributed stack hands them to the services' processes. So the two cannot
 * drift (config/service-settings.spec.ts checks that every knob reaches both), and
 * docker-compose.yml carries the values of the default configuration
 * (test/integration/infra.int.spec.ts holds the two together).
 */
import { DEFAULT_CISPO_MASK } from '@anvil/rl';
import type { RunConfig } from './run-config';

export const APPS = ['middleware', 'inference-proxy', 'trainer', 'gateway', 'rollout-manager'] as const;
export type App = (typeof APPS)[number];
/** Start order: each service's dependencies first (the gateway needs the proxy's address, the rollout-manager the gateway's). */
export const START_WAVES: App[][] = [['middleware', 'inference-proxy'], ['trainer', 'gateway'], ['rollout-manager']];
/** Stop order: the producers of work first (no new rollouts, then no new calls), then the proxy, then the Data Pool and the trainer. */
export const STOP_WAVES: App[][] = [['rollout-manager'], ['gateway'], ['inference-proxy'], ['middleware', 'trainer']];

/** The starting weights of a run and how the gateway serves them. */
export interface RunModel {
  /** A Hugging Face checkpoint directory (config.json + safetensors): the proxy serves it, the trainer starts from it. */
  checkpointDir: string;
  /** The directory of its tokenizer.json and chat template (a user's model), or null for the tiny model's byte tokenizer and ChatML template. */
  chatFormatDir: string | null;
  /** The model name the gateway serves (what agents' requests name). */
  servedName: string;
}

/** What one run's services share beyond the knobs, in either way to run. */
export interface RunWiring {
  runId: string;
  model: RunModel;
  /** The gateway's admin credential, shared with the rollout-manager only. */
  adminToken: string;
  /** Where the trainer writes every published version; weights.published names a directory under it, which the proxy reads. */
  checkpointDir: string;
}

/** A distributed run's infrastructure: the broker, the run's own database, and its topic prefix. */
export interface RunInfrastructure {
  kafkaBrokers: string;
  databaseUrl: string;
  /** Every topic and consumer group of the run lives under it, so runs on one broker never mix. */
  topicPrefix: string;
}

export type Env = Record<string, string>;

/** Knobs of the run configuration, per service (no addresses, paths or secrets: those are per deployment). */
export function knobEnvs(cfg: RunConfig): Record<App, Env> {
  const a = cfg.algorithm;
  const threads = String(cfg.engineThreads);
  const middleware: Env = {
    DATA_POOL_ESTIMATOR: a.advantage,
    DATA_POOL_PROCESS_REWARD_WEIGHT: String(a.processRewardWeight),
    DATA_POOL_IN_FLIGHT: String(cfg.rollouts.concurrency),
    DATA_POOL_BATCH_TRAJECTORIES: String(cfg.scheduler.groupsPerBatch * cfg.rollouts.groupSize),
    DATA_POOL_DROP_ZERO_VARIANCE: String(cfg.scheduler.dropZeroVariance),
    // always set: the run configuration's default ('adaptive') is not the bare service's (round(0.3 N))
    DATA_POOL_WINDOW: String(cfg.scheduler.window),
  };
  const trainer: Env = {
    TRAINER_LOSS: a.loss,
    TRAINER_AGGREGATION: a.aggregation,
    TRAINER_LR: String(a.lr),
    TRAINER_WARMUP_STEPS: String(a.warmupSteps),
    TRAINER_MAX_GRAD_NORM: String(a.maxGradNorm),
    TRAINER_MINI_BATCHES: String(a.miniBatches),
    TRAINER_ADAM_BETA1: String(a.beta1),
    TRAINER_ADAM_BETA2: String(a.beta2),
    TRAINER_ADAM_EPS: String(a.eps),
    TRAINER_WEIGHT_DECAY: String(a.weightDecay ?? 0),
    TRAINER_PACK_TOKENS: String(a.packTokens ?? 65_536),
    TRAINER_PUBLISH_EVERY: '1',
    TRAINER_CHECKPOINT_EVERY: String(cfg.checkpointEvery),
    TRAINER_MAX_NON_FINITE_SKIPS: '5',
    TRAINER_MAX_BATCHES: String(cfg.budget.steps),
    INITIAL_POLICY_VERSION: '0',
    ENGINE_THREADS: threads,
    // A cosine decay spans the whole step budget, counted in optimizer steps.
    TRAINER_LR_DECAY_STEPS: String(a.lrSchedule === 'cosine' ? cfg.budget.steps * a.miniBatches : 0),
    TRAINER_LR_MIN_FACTOR: String(a.minLrFactor),
  };
  if (a.epsLow !== undefined) trainer.TRAINER_EPS_LOW = String(a.epsLow);
  if (a.epsHigh !== undefined) trainer.TRAINER_EPS_HIGH = String(a.epsHigh);
  if (a.cispoMask)
    trainer.TRAINER_CISPO_MASK = `${a.cispoMask.epsLow ?? DEFAULT_CISPO_MASK.epsLow},${a.cispoMask.epsHigh ?? DEFAULT_CISPO_MASK.epsHigh}`;
  if (a.dualClip) trainer.TRAINER_DUAL_CLIP = String(a.dualClip);
  if (a.constantNormalizer !== undefined) trainer.TRAINER_CONSTANT_NORMALIZER = String(a.constantNormalizer);
  if (a.tokenTisCap !== undefined) trainer.TRAINER_TOKEN_TIS_CAP = String(a.tokenTisCap);
  if (a.seqTisCap !== undefined) trainer.TRAINER_SEQ_TIS_CAP = String(a.seqTisCap);
  if (a.klCoef > 0) trainer.TRAINER_KL_COEF = String(a.klCoef);
  if (a.lora) {
    trainer.TRAINER_LORA_RANK = String(a.lora.rank);
    trainer.TRAINER_LORA_ALPHA = String(a.lora.alpha);
    if (a.lora.dropout !== undefined) trainer.TRAINER_LORA_DROPOUT = String(a.lora.dropout);
    if (a.lora.targets) trainer.TRAINER_LORA_TARGETS = a.lora.targets.join(',');
    trainer.TRAINER_PUBLISH_FORMAT = a.publish;
  }
  return {
    middleware,
    'inference-proxy': {
      INFERENCE_BACKEND: 'embedded',
      // The generator decodes every rollout in flight together, so none waits for a slot (see EMBEDDED_MAX_BATCH).
      EMBEDDED_MAX_BATCH: String(cfg.rollouts.concurrency),
      MAX_IN_FLIGHT_PER_REPLICA: String(cfg.rollouts.concurrency * 2),
      INITIAL_POLICY_VERSION: '0',
      ENGINE_THREADS: threads,
    },
    trainer,
    gateway: { MAX_STALENESS: String(cfg.rollouts.eta), INITIAL_POLICY_VERSION: '0' },
    'rollout-manager': {
      GROUP_SIZE: String(cfg.rollouts.groupSize),
      MAX_CONCURRENT_ROLLOUTS: String(cfg.rollouts.concurrency),
      MAX_STALENESS: String(cfg.rollouts.eta),
      GROUPS_PER_STEP: String(cfg.scheduler.groupsPerBatch),
      INITIAL_POLICY_VERSION: '0',
      ADMISSION_POLL_MS: '100',
    },
  };
}

/**
 * One service's settings for a run, in either way to run: its knobs and the run's wiring (model,
 * served name, chat format, directories, the admin token). `urls` are the addresses of services
 * started before it: the gateway needs the inference-proxy's, the rollout-manager the gateway's.
 */
export function serviceSettings(app: App, cfg: RunConfig, w: RunWiring, urls: Partial<Record<App, string>>): Env {
  const knobs = knobEnvs(cfg)[app];
  const need = (dep: App) => {
    const url = urls[dep];
    if (!url) throw new Error(`${app} needs ${dep}'s address: start ${dep} first`);
    return url;
  };
  const chatFormat: Env = w.model.chatFormatDir ? { GATEWAY_CHAT_FORMAT: 'hf', GATEWAY_TOKENIZER_DIR: w.model.chatFormatDir } : {};
  switch (app) {
    case 'middleware':
      return { ...knobs, DATA_POOL_RUN_ID: w.runId };
    case 'inference-proxy':
      return { ...knobs, EMBEDDED_CHECKPOINT_DIR: w.model.checkpointDir };
    case 'trainer':
      return {
        ...knobs,
        TRAINER_RUN_ID: w.runId,
        TRAINER_INITIAL_CHECKPOINT_DIR: w.model.checkpointDir,
        CHECKPOINT_DIR: w.checkpointDir,
        ...(w.model.chatFormatDir ? { TRAINER_TOKENIZER_DIR: w.model.chatFormatDir } : {}),
      };
    case 'gateway':
      return {
        ...knobs,
        GATEWAY_ADMIN_TOKEN: w.adminToken,
        INFERENCE_PROXY_URL: need('inference-proxy'),
        GATEWAY_MODEL_NAME: w.model.servedName,
        ...chatFormat,
      };
    case 'rollout-manager':
      return { ...knobs, GATEWAY_ADMIN_TOKEN: w.adminToken, GATEWAY_URL: need('gateway'), GATEWAY_MODEL_NAME: w.model.servedName };
  }
}

/** A distributed service's whole environment: its settings plus the infrastructure's addresses and its own listening address. */
export function serviceEnv(app: App, cfg: RunConfig, w: RunWiring, infra: RunInfrastructure, urls: Partial<Record<App, string>>): Env {
  return {
    KAFKA_BROKERS: infra.kafkaBrokers,
    DATABASE_URL: infra.databaseUrl,
    KAFKA_TOPIC_PREFIX: infra.topicPrefix,
    LOG_LEVEL: 'info',
    HOST: '127.0.0.1',
    PORT: '0',
    ...(app === 'inference-proxy' ? { DEPLOYMENT_NAME: 'stack' } : {}),
    ...serviceSettings(app, cfg, w, urls),
  };
}
