import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import type { MessageBus } from '@anvil/messaging';
import { runMigrations } from '@anvil/persistence';
import type { Logger, ServiceMetrics } from '@anvil/observability';
import { DATA_SOURCE, EVENT_BUS, LOGGER, METRICS, ReadinessRegistry } from '@anvil/service-kit';
import { DataPoolRuntime } from '../runtime';
import type { DataPoolConfig } from './pool';

export const DATA_POOL_OPTIONS = Symbol('DATA_POOL_OPTIONS');
export interface DataPoolOptions {
  group: string;
  concurrency: number;
  migrateOnStart: boolean;
  pool?: Partial<DataPoolConfig>;
}

/**
 * The thin Nest wrapper around DataPoolRuntime: starts it in the background (the database and
 * the broker may still be coming up; /readyz says so until it has subscribed) and stops it
 * gracefully (commits what was handled, publishes the outbox, gives the scheduler lease up).
 */
@Injectable()
export class DataPoolConsumer implements OnModuleInit, OnModuleDestroy {
  private readonly runtime: DataPoolRuntime;
  private started = false;
  private stopping = false;
  private starting: Promise<void> | null = null;

  constructor(
    @Inject(EVENT_BUS) bus: MessageBus,
    @Inject(DATA_SOURCE) private readonly dataSource: DataSource,
    @Inject(DATA_POOL_OPTIONS) private readonly options: DataPoolOptions,
    @Inject(LOGGER) private readonly logger: Logger,
    @Inject(METRICS) metrics: ServiceMetrics,
    @Inject(ReadinessRegistry) private readonly readiness: ReadinessRegistry,
  ) {
    this.runtime = new DataPoolRuntime({ bus, dataSource, group: options.group, concurrency: options.concurrency, config: options.pool, logger, metrics });
  }

  onModuleInit(): void {
    this.readiness.add({
      name: 'data-pool',
      check: async () => {
        if (!this.started) throw new Error('not subscribed yet');
      },
    });
    this.starting = this.connect();
  }

  private async connect(): Promise<void> {
    for (let attempt = 1; !this.started && !this.stopping; attempt++) {
      try {
        if (!this.dataSource.isInitialized) await this.dataSource.initialize();
        if (this.options.migrateOnStart) {
          const applied = await runMigrations(this.dataSource);
          if (applied.length) this.logger.info('migrations applied', { applied });
        }
        await this.runtime.start();
        this.started = true;
        this.logger.info('data pool running', { group: this.options.group, runId: this.runtime.config.runId, owner: this.runtime.config.owner });
      } catch (err) {
        this.logger.warn('data pool not started yet; retrying', { attempt, err });
        await new Promise((r) => setTimeout(r, Math.min(5_000, 250 * attempt)));
      }
    }
  }

  async onModuleDestroy(): Promise<void> {
    this.stopping = true;
    await this.starting;
    if (this.started) await this.runtime.stop();
  }
}
