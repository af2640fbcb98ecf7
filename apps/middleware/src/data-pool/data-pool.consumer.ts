import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { TOPICS } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import { runMigrations } from '@anvil/persistence';
import type { Logger, ServiceMetrics } from '@anvil/observability';
import { BackgroundSubscription, DATA_SOURCE, EVENT_BUS, LOGGER, METRICS, ReadinessRegistry } from '@anvil/service-kit';
import { DataPoolIngestion } from './ingestion';

export const DATA_POOL_OPTIONS = Symbol('DATA_POOL_OPTIONS');
export interface DataPoolOptions {
  group: string;
  concurrency: number;
  migrateOnStart: boolean;
}

/**
 * Consumes llm-call and rollout events into PostgreSQL. Stopping commits what was handled
 * and leaves the rest to the next member of the group (graceful shutdown hands work back).
 */
@Injectable()
export class DataPoolConsumer implements OnModuleInit, OnModuleDestroy {
  private readonly subscription: BackgroundSubscription;

  constructor(
    @Inject(EVENT_BUS) bus: MessageBus,
    @Inject(DATA_SOURCE) dataSource: DataSource,
    @Inject(DATA_POOL_OPTIONS) options: DataPoolOptions,
    @Inject(LOGGER) logger: Logger,
    @Inject(METRICS) metrics: ServiceMetrics,
    @Inject(ReadinessRegistry) readiness: ReadinessRegistry,
  ) {
    const ingested = metrics.counter('data_pool_events_ingested_total', 'Events written to the Data Pool', ['type']);
    const duplicates = metrics.counter('data_pool_events_duplicate_total', 'Redelivered events that changed nothing', ['type']);
    const ingestion = new DataPoolIngestion(dataSource, options.group);
    // Subscribing waits for the database and the broker: in the background, so the service
    // still answers /healthz and an honest /readyz while they come up.
    this.subscription = new BackgroundSubscription({
      name: 'data-pool-consumer',
      bus,
      logger,
      readiness,
      prepare: async () => {
        if (!dataSource.isInitialized) await dataSource.initialize();
        if (options.migrateOnStart) {
          const applied = await runMigrations(dataSource);
          if (applied.length) logger.info('migrations applied', { applied });
        }
      },
      subscribe: {
        group: options.group,
        topics: [TOPICS.llmCalls, TOPICS.rollouts],
        concurrency: options.concurrency,
        fromBeginning: true,
        handler: async (event) => {
          const changed = await ingestion.ingest(event);
          (changed ? ingested : duplicates).inc({ type: event.type });
        },
        // One transaction per fetched run of events instead of one per event.
        batchHandler: async (items) => {
          const fresh = await ingestion.ingestBatch(items.map((i) => i.event));
          for (const { event } of items) (fresh.has(event.id) ? ingested : duplicates).inc({ type: event.type });
        },
      },
    });
  }

  onModuleInit(): void {
    this.subscription.start();
  }

  async onModuleDestroy(): Promise<void> {
    await this.subscription.stop();
  }
}
