import { Global, Inject, Module, type DynamicModule, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { createBus, type MessageBus } from '@anvil/messaging';
import { createDataSource } from '@anvil/persistence';
import type { Logger } from '@anvil/observability';
import { ReadinessRegistry } from './readiness';
import { DATA_SOURCE, EVENT_BUS, LOGGER } from './tokens';

export interface InfraOptions {
  service: string;
  kafkaBrokers: string[];
  databaseUrl: string;
  topicPrefix?: string;
}

/**
 * Kafka and PostgreSQL for a distributed service: one bus and one DataSource per process,
 * registered as readiness checks, closed last on shutdown (after the consumers that use
 * them have stopped in their own onModuleDestroy hooks).
 */
@Global()
@Module({})
export class InfraModule implements OnModuleInit, OnApplicationShutdown {
  constructor(
    @Inject(EVENT_BUS) private readonly bus: MessageBus,
    @Inject(DATA_SOURCE) private readonly dataSource: DataSource,
    @Inject(ReadinessRegistry) private readonly readiness: ReadinessRegistry,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  static forRoot(opts: InfraOptions): DynamicModule {
    return {
      module: InfraModule,
      providers: [
        {
          provide: EVENT_BUS,
          useFactory: () => createBus({ kind: 'kafka', brokers: opts.kafkaBrokers, clientId: opts.service, topicPrefix: opts.topicPrefix }),
        },
        {
          provide: DATA_SOURCE,
          // Connecting lazily keeps a service bootable (and /readyz honest) while the
          // database is still starting; the pool reconnects on its own.
          useFactory: () => createDataSource({ url: opts.databaseUrl }),
        },
      ],
      exports: [EVENT_BUS, DATA_SOURCE],
    };
  }

  onModuleInit(): void {
    this.readiness.add({
      name: 'kafka',
      check: async () => {
        const health = await this.bus.health();
        if (!health.ok) throw new Error(`broker unreachable: ${JSON.stringify(health.detail)}`);
      },
    });
    this.readiness.add({ name: 'postgres', check: () => this.pingDatabase() });
  }

  private async pingDatabase(): Promise<void> {
    if (!this.dataSource.isInitialized) await this.dataSource.initialize();
    await this.dataSource.query('SELECT 1');
  }

  async onApplicationShutdown(): Promise<void> {
    await this.bus.close().catch((err: unknown) => this.logger.warn('bus close failed', { err }));
    if (this.dataSource.isInitialized) await this.dataSource.destroy().catch((err: unknown) => this.logger.warn('database close failed', { err }));
  }
}
