import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { setThreads, type Model } from '@anvil/engine';
import type { MessageBus } from '@anvil/messaging';
import type { Logger, ServiceMetrics } from '@anvil/observability';
import { runMigrations } from '@anvil/persistence';
import { BackgroundStart, DATA_SOURCE, EVENT_BUS, LOGGER, METRICS, ReadinessRegistry } from '@anvil/service-kit';
import { PostgresBatchSource } from './batches/batch-source';
import { CheckpointStore } from './checkpoints/checkpoint-store';
import { StepLog } from './http/step-log';
import { trainerOptionsOf, type TrainerConfig } from './config';
import { TrainerMetrics } from './metrics';
import { TrainerRuntime } from './runtime';
import { loadTrainerModels } from './trainer-models';
import { TRAINER_CONFIG } from './tokens';

/** The Data Pool's tables the trainer reads (claim-check blobs, the batch log for catch-up). */
const BATCH_TABLES = ['train_batch_blobs', 'data_pool_batch_stats'] as const;

interface Started {
  runtime: TrainerRuntime;
  model: Model;
  /** The KL penalty's reference policy: the starting weights, loaded a second time and never trained (null without a penalty). */
  reference: Model | null;
}

/**
 * Builds the model and the TrainerRuntime from the configuration, with the service's bus and
 * database, and starts it: restores the newest full checkpoint (weights, AdamW, data position),
 * subscribes to train_batch.created and trains what the batch log holds beyond that position.
 * On any failure what was built is stopped and released, so a retry starts from scratch.
 */
export async function startTrainer(
  config: TrainerConfig,
  deps: {
    bus: MessageBus;
    dataSource: Pick<DataSource, 'query'>;
    logger: Logger;
    metrics: TrainerMetrics;
    steps?: StepLog;
    onFatal?: (err: Error) => void;
    onDone?: (runtime: TrainerRuntime) => void;
  },
): Promise<Started> {
  setThreads(config.ENGINE_THREADS);
  const dir = config.TRAINER_INITIAL_CHECKPOINT_DIR;
  // The reference is loaded from the starting weights, not from a restored checkpoint: a resumed run keeps the same one.
  const { model, reference } = await loadTrainerModels(config);
  if (!dir) deps.logger.warn('no TRAINER_INITIAL_CHECKPOINT_DIR: training the built-in tiny model (random init, seed 0)');
  const lora = model.lora;
  if (lora) deps.logger.info('training LoRA adapters, the base frozen', { ...lora, publish: config.TRAINER_PUBLISH_FORMAT });
  const options = trainerOptionsOf(config);
  let runtime: TrainerRuntime;
  try {
    runtime = new TrainerRuntime(options, {
      bus: deps.bus,
      model,
      ...(reference ? { reference } : {}),
      store: new CheckpointStore(config.CHECKPOINT_DIR, {
        keepPublished: config.CHECKPOINT_KEEP_PUBLISHED,
        keepFull: config.CHECKPOINT_KEEP_FULL,
        ...(config.TRAINER_TOKENIZER_DIR || dir ? { tokenizerDir: config.TRAINER_TOKENIZER_DIR ?? dir } : {}),
      }),
      batches: new PostgresBatchSource(deps.dataSource),
      logger: deps.logger,
      onStep: (e) => {
        deps.metrics.step(e, runtime.dataPosition);
        deps.steps?.push(e);
      },
      onFatal: (err) => {
        deps.metrics.fatal.set(1);
        deps.onFatal?.(err);
      },
    });
  } catch (err) {
    model.dispose();
    reference?.dispose();
    throw err;
  }
  try {
    await runtime.start();
  } catch (err) {
    await runtime.stop(0).catch(() => undefined);
    model.dispose();
    reference?.dispose();
    throw err;
  }
  deps.metrics.started(runtime.currentVersion, runtime.dataPosition);
  void runtime.whenDone().then(() => deps.onDone?.(runtime));
  return { runtime, model, reference };
}

/**
 * Runs the trainer in the background (BackgroundStart: the database, the schema and the broker may
 * still be coming up; retried with the services' backoff) and registers two readiness checks:
 * `trainer` (the model loaded, the newest checkpoint restored, the consumer subscribed) and
 * `training` (no fatal error, e.g. too many non-finite steps: the trainer then stops consuming and
 * stays not ready). On shutdown the batch in progress finishes (checkpoint, events, offset
 * commit); deliveries behind it are handed back uncommitted.
 */
@Injectable()
export class TrainerLifecycle implements OnModuleInit, OnModuleDestroy {
  private readonly task: BackgroundStart<Started>;
  private readonly metrics: TrainerMetrics;
  private fatal: Error | null = null;
  /** Recent steps for the internal API (http/trainer.controller.ts). */
  readonly steps = new StepLog();

  constructor(
    @Inject(TRAINER_CONFIG) private readonly config: TrainerConfig,
    @Inject(EVENT_BUS) bus: MessageBus,
    @Inject(DATA_SOURCE) dataSource: DataSource,
    @Inject(LOGGER) logger: Logger,
    @Inject(METRICS) serviceMetrics: ServiceMetrics,
    @Inject(ReadinessRegistry) readiness: ReadinessRegistry,
  ) {
    this.metrics = new TrainerMetrics(serviceMetrics);
    const log = logger.child({ component: 'trainer' });
    // Past this, shutdown stops waiting for the batch in progress' delivery (the deadline of the whole shutdown is SHUTDOWN_TIMEOUT_MS).
    const stopTimeoutMs = Math.max(1_000, config.SHUTDOWN_TIMEOUT_MS - 5_000);
    this.task = new BackgroundStart<Started>({
      name: 'trainer',
      logger: log,
      readiness,
      stopTimeoutMs,
      prepare: async () => {
        if (!dataSource.isInitialized) await dataSource.initialize();
        if (config.DB_MIGRATE_ON_START) {
          const applied = await runMigrations(dataSource);
          if (applied.length) log.info('migrations applied', { applied });
        }
        const [row]: Record<string, string | null>[] = await dataSource.query(
          `SELECT ${BATCH_TABLES.map((t, i) => `to_regclass('${t}') AS t${i}`).join(', ')}`,
        );
        const missing = BATCH_TABLES.filter((_, i) => !row?.[`t${i}`]);
        if (missing.length)
          throw new Error(
            `the Data Pool's tables ${missing.join(', ')} do not exist yet (the middleware migrates them, or set DB_MIGRATE_ON_START=true)`,
          );
      },
      start: () =>
        startTrainer(config, {
          bus,
          dataSource,
          logger: log,
          metrics: this.metrics,
          steps: this.steps,
          onFatal: (err) => (this.fatal = err),
          // A fatal error or the batch budget: stop consuming, so no delivery is committed untrained
          // (not awaited: this runs inside the last batch's handler, which stop() waits for).
          onDone: (runtime) => {
            if (!runtime.failure)
              log.info('training budget reached: no further batches are consumed', { maxBatches: config.TRAINER_MAX_BATCHES });
            setImmediate(() => void runtime.stop(stopTimeoutMs).catch((e: unknown) => log.warn('trainer stop failed', { err: e })));
          },
        }),
      stop: async ({ runtime, model, reference }) => {
        await runtime.stop(stopTimeoutMs);
        model.dispose();
        reference?.dispose();
      },
      describe: ({ runtime }) => ({
        runId: config.TRAINER_RUN_ID,
        group: config.TRAINER_CONSUMER_GROUP,
        version: runtime.currentVersion,
        position: runtime.dataPosition,
      }),
    });
    readiness.add({
      name: 'training',
      check: async () => {
        if (this.fatal) throw new Error(`stopped: ${this.fatal.message}`);
        const runtime = this.task.current?.runtime;
        return runtime ? { version: runtime.currentVersion, nextBatchStep: runtime.dataPosition.nextBatchStep } : null;
      },
    });
  }

  /** The running trainer, once started (tests, ops). */
  get runtime(): TrainerRuntime | null {
    return this.task.current?.runtime ?? null;
  }

  onModuleInit(): void {
    this.task.run();
  }

  async onModuleDestroy(): Promise<void> {
    await this.task.stop();
  }
}
