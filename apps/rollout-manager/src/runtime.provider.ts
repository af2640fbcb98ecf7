import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { runMigrations } from '@anvil/persistence';
import type { MessageBus } from '@anvil/messaging';
import type { Logger, ServiceMetrics } from '@anvil/observability';
import { DATA_SOURCE, EVENT_BUS, LOGGER, METRICS, ReadinessRegistry } from '@anvil/service-kit';
import type { RolloutManagerConfig } from './config';
import { RolloutRuntime } from './runtime';
import { rolloutRuntimeConfigOf } from './runtime-config';

export const ROLLOUT_CONFIG = Symbol('ROLLOUT_CONFIG');
export const ROLLOUT_RUNTIME = Symbol('ROLLOUT_RUNTIME');

export const runtimeProvider = {
  provide: ROLLOUT_RUNTIME,
  inject: [ROLLOUT_CONFIG, EVENT_BUS, DATA_SOURCE, METRICS, LOGGER],
  useFactory: (config: RolloutManagerConfig, bus: MessageBus, ds: DataSource, metrics: ServiceMetrics, logger: Logger) =>
    new RolloutRuntime({
      gatewayUrl: config.GATEWAY_URL,
      adminToken: config.GATEWAY_ADMIN_TOKEN,
      bus,
      dataSource: ds,
      metrics,
      logger: logger.child({ component: 'rollouts' }),
      config: rolloutRuntimeConfigOf(config),
    }),
};

/** Starts the runtime (recovery, subscriptions) with the module; on shutdown running rollouts get most of SHUTDOWN_TIMEOUT_MS, then end as aborted with their sessions closed. */
@Injectable()
export class RuntimeLifecycle implements OnModuleInit, OnModuleDestroy {
  constructor(
    @Inject(ROLLOUT_RUNTIME) private readonly runtime: RolloutRuntime,
    @Inject(ROLLOUT_CONFIG) private readonly config: RolloutManagerConfig,
    @Inject(ReadinessRegistry) private readonly readiness: ReadinessRegistry,
    @Inject(DATA_SOURCE) private readonly ds: DataSource,
  ) {}

  async onModuleInit(): Promise<void> {
    // The shared DataSource connects lazily (the bus and database modules keep a service bootable
    // while PostgreSQL starts); recovery reads durable state, so connect before it.
    if (!this.ds.isInitialized) await this.ds.initialize();
    if (this.config.DB_MIGRATE_ON_START) await runMigrations(this.ds);
    await this.runtime.start();
    this.readiness.add({ name: 'rollout-runtime', check: async () => this.runtime.snapshot().running });
  }

  async onModuleDestroy(): Promise<void> {
    await this.runtime.stop(Math.max(0, this.config.SHUTDOWN_TIMEOUT_MS - 5_000));
  }
}
