import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import type { MessageBus } from '@anvil/messaging';
import { runMigrations } from '@anvil/persistence';
import type { Logger, ServiceMetrics } from '@anvil/observability';
import { BackgroundStart, DATA_SOURCE, EVENT_BUS, LOGGER, METRICS, ReadinessRegistry } from '@anvil/service-kit';
import { DataPoolRuntime } from '../runtime';
import type { DataPoolConfigInput } from './config';

export const DATA_POOL_OPTIONS = Symbol('DATA_POOL_OPTIONS');
export interface DataPoolOptions {
  group: string;
  concurrency: number;
  migrateOnStart: boolean;
  /** Retention round every this many ms (0 = never; default 60 s). */
  pruneIntervalMs?: number;
  pool?: DataPoolConfigInput;
}

/**
 * The thin Nest wrapper around DataPoolRuntime: starts it in the background (BackgroundStart:
 * the database and the broker may still be coming up; /readyz says so until it has
 * subscribed; retried with the services' backoff) and stops it gracefully (commits what was
 * handled, publishes the outbox, gives the scheduler lease up), also while still starting.
 */
@Injectable()
export class DataPoolConsumer implements OnModuleInit, OnModuleDestroy {
  private readonly task: BackgroundStart<DataPoolRuntime>;

  constructor(
    @Inject(EVENT_BUS) bus: MessageBus,
    @Inject(DATA_SOURCE) dataSource: DataSource,
    @Inject(DATA_POOL_OPTIONS) options: DataPoolOptions,
    @Inject(LOGGER) logger: Logger,
    @Inject(METRICS) metrics: ServiceMetrics,
    @Inject(ReadinessRegistry) readiness: ReadinessRegistry,
  ) {
    const runtime = new DataPoolRuntime({
      bus,
      dataSource,
      group: options.group,
      concurrency: options.concurrency,
      config: options.pool,
      ...(options.pruneIntervalMs !== undefined ? { pruneIntervalMs: options.pruneIntervalMs } : {}),
      logger,
      metrics,
    });
    this.task = new BackgroundStart<DataPoolRuntime>({
      name: 'data-pool',
      logger,
      readiness,
      prepare: async () => {
        if (!dataSource.isInitialized) await dataSource.initialize();
        if (options.migrateOnStart) {
          const applied = await runMigrations(dataSource);
          if (applied.length) logger.info('migrations applied', { applied });
        }
      },
      start: async () => (await runtime.start(), runtime),
      stop: (r) => r.stop(),
      describe: (r) => ({ group: options.group, runId: r.config.runId, owner: r.config.owner }),
    });
  }

  onModuleInit(): void {
    this.task.run();
  }

  async onModuleDestroy(): Promise<void> {
    await this.task.stop();
  }
}
