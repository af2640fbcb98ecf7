import { Global, Inject, Module, type DynamicModule, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { createBus, MemoryBus, type MessageBus } from '@anvil/messaging';
import { createDataSource, isEmbeddedDatabaseUrl } from '@anvil/persistence';
import type { Logger } from '@anvil/observability';
import { ReadinessRegistry } from './readiness';
import { DATA_SOURCE, EVENT_BUS, LOGGER } from './tokens';

/** A bus and a database built once and shared by every service module of one process (see createSharedInfra). */
export interface SharedInfra {
  readonly bus: MessageBus;
  readonly dataSource: DataSource;
  /** Closes the bus, then the database. The services using them must be closed first. */
  close(): Promise<void>;
}

export interface InfraOptions {
  service: string;
  /** 'kafka' (default): a KafkaBus on `kafkaBrokers`; 'memory': an in-process bus of this module's own. */
  eventBusKind?: 'kafka' | 'memory';
  kafkaBrokers: string[];
  /** postgres://... (a server) or pglite://<dir> / memory (embedded PGlite). */
  databaseUrl: string;
  topicPrefix?: string;
  /**
   * The one-process host: use these instances (already connected and migrated) instead of
   * building a bus and a DataSource; they are not closed by this module.
   */
  shared?: SharedInfra;
}

interface InfraState {
  owned: boolean;
  busKind: 'kafka' | 'memory';
  embeddedDatabase: boolean;
}
const INFRA_STATE = Symbol('INFRA_STATE');

/**
 * The bus and the database of a service: one bus and one DataSource per process, registered
 * as readiness checks, closed last on shutdown (after the consumers that use them have
 * stopped in their own onModuleDestroy hooks). The same service code runs on Kafka +
 * PostgreSQL (distributed) and on the in-process bus + PGlite (embedded), by configuration.
 */
@Global()
@Module({})
export class InfraModule implements OnModuleInit, OnApplicationShutdown {
  constructor(
    @Inject(EVENT_BUS) private readonly bus: MessageBus,
    @Inject(DATA_SOURCE) private readonly dataSource: DataSource,
    @Inject(ReadinessRegistry) private readonly readiness: ReadinessRegistry,
    @Inject(LOGGER) private readonly logger: Logger,
    @Inject(INFRA_STATE) private readonly state: InfraState,
  ) {}

  static forRoot(opts: InfraOptions): DynamicModule {
    const busKind = opts.shared ? opts.shared.bus.kind : (opts.eventBusKind ?? 'kafka');
    const state: InfraState = {
      owned: !opts.shared,
      busKind,
      embeddedDatabase: opts.shared ? !(opts.shared.dataSource.options as { url?: string }).url : isEmbeddedDatabaseUrl(opts.databaseUrl),
    };
    return {
      module: InfraModule,
      providers: [
        { provide: INFRA_STATE, useValue: state },
        {
          provide: EVENT_BUS,
          useFactory: (): MessageBus => {
            if (opts.shared) return opts.shared.bus;
            if (busKind === 'memory') return new MemoryBus({ topicPrefix: opts.topicPrefix });
            return createBus({ kind: 'kafka', brokers: opts.kafkaBrokers, clientId: opts.service, topicPrefix: opts.topicPrefix });
          },
        },
        {
          provide: DATA_SOURCE,
          // Connecting lazily keeps a service bootable (and /readyz honest) while the
          // database is still starting; the pool reconnects on its own.
          useFactory: () => opts.shared?.dataSource ?? createDataSource({ url: opts.databaseUrl }),
        },
      ],
      exports: [EVENT_BUS, DATA_SOURCE],
    };
  }

  onModuleInit(): void {
    this.readiness.add({
      name: this.state.busKind === 'kafka' ? 'kafka' : 'event-bus',
      check: async () => {
        const health = await this.bus.health();
        if (!health.ok) throw new Error(`broker unreachable: ${JSON.stringify(health.detail)}`);
      },
    });
    this.readiness.add({ name: this.state.embeddedDatabase ? 'database' : 'postgres', check: () => this.pingDatabase() });
  }

  private async pingDatabase(): Promise<void> {
    if (!this.dataSource.isInitialized) await this.dataSource.initialize();
    await this.dataSource.query('SELECT 1');
  }

  async onApplicationShutdown(): Promise<void> {
    if (!this.state.owned) return;
    await this.bus.close().catch((err: unknown) => this.logger.warn('bus close failed', { err }));
    if (this.dataSource.isInitialized)
      await this.dataSource.destroy().catch((err: unknown) => this.logger.warn('database close failed', { err }));
  }
}
