import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { TOPICS } from '@anvil/contracts';
import type { MessageBus, Subscription } from '@anvil/messaging';
import { runMigrations } from '@anvil/persistence';
import type { Logger, ServiceMetrics } from '@anvil/observability';
import { DATA_SOURCE, EVENT_BUS, LOGGER, METRICS, ReadinessRegistry } from '@anvil/service-kit';
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
  private subscription: Subscription | null = null;
  private readonly ingested;
  private readonly duplicates;

  constructor(
    @Inject(EVENT_BUS) private readonly bus: MessageBus,
    @Inject(DATA_SOURCE) private readonly dataSource: DataSource,
    @Inject(DATA_POOL_OPTIONS) private readonly options: DataPoolOptions,
    @Inject(LOGGER) private readonly logger: Logger,
    @Inject(METRICS) metrics: ServiceMetrics,
    @Inject(ReadinessRegistry) private readonly readiness: ReadinessRegistry,
  ) {
    this.ingested = metrics.counter('data_pool_events_ingested_total', 'Events written to the Data Pool', ['type']);
    this.duplicates = metrics.counter('data_pool_events_duplicate_total', 'Redelivered events that changed nothing', ['type']);
  }

  async onModuleInit(): Promise<void> {
    this.readiness.add({
      name: 'data-pool-consumer',
      check: async () => {
        if (!this.subscription) throw new Error('not subscribed yet');
      },
    });
    // Subscribing waits for the database and the broker; do it in the background so the
    // service still answers /healthz and an honest /readyz while they come up.
    void this.connect();
  }

  private async connect(): Promise<void> {
    for (let attempt = 1; !this.subscription; attempt++) {
      try {
        if (!this.dataSource.isInitialized) await this.dataSource.initialize();
        if (this.options.migrateOnStart) {
          const applied = await runMigrations(this.dataSource);
          if (applied.length) this.logger.info('migrations applied', { applied });
        }
        const ingestion = new DataPoolIngestion(this.dataSource, this.options.group);
        this.subscription = await this.bus.subscribe({
          group: this.options.group,
          topics: [TOPICS.llmCalls, TOPICS.rollouts],
          concurrency: this.options.concurrency,
          fromBeginning: true,
          handler: async (event) => {
            const changed = await ingestion.ingest(event);
            (changed ? this.ingested : this.duplicates).inc({ type: event.type });
          },
          // One transaction per fetched run of events instead of one per event.
          batchHandler: async (items) => {
            const fresh = await ingestion.ingestBatch(items.map((i) => i.event));
            for (const { event } of items) (fresh.has(event.id) ? this.ingested : this.duplicates).inc({ type: event.type });
          },
        });
        this.logger.info('data pool consumer subscribed', { group: this.options.group });
      } catch (err) {
        this.logger.warn('data pool consumer not connected yet; retrying', { attempt, err });
        await new Promise((r) => setTimeout(r, Math.min(5_000, 250 * attempt)));
      }
    }
  }

  async onModuleDestroy(): Promise<void> {
    await this.subscription?.stop({ timeoutMs: 10_000 });
  }
}
