import { Inject, Injectable, type BeforeApplicationShutdown, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { Logger } from '@anvil/observability';
import { LOGGER, ReadinessRegistry } from '@anvil/service-kit';
import type { GatewayConfig } from '../config';
import { SCHEMA_GATE, type SchemaGate } from '../sessions/schema-gate';
import { GATEWAY_CONFIG, IN_FLIGHT } from '../tokens';
import type { InFlightCalls } from './in-flight';

/**
 * Readiness of the gateway's tables, and graceful shutdown: before the HTTP server and then the
 * bus and the database close, running calls finish and publish their records (new ones get 503).
 */
@Injectable()
export class GatewayLifecycle implements OnModuleInit, OnModuleDestroy, BeforeApplicationShutdown {
  constructor(
    @Inject(IN_FLIGHT) private readonly inFlight: InFlightCalls,
    @Inject(SCHEMA_GATE) private readonly schema: SchemaGate,
    @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
    @Inject(LOGGER) private readonly logger: Logger,
    @Inject(ReadinessRegistry) private readonly readiness: ReadinessRegistry,
  ) {}

  onModuleInit(): void {
    this.readiness.add({
      name: 'gateway-schema',
      check: async () => {
        if (!this.schema.isReady) throw new Error('database schema not ready yet');
      },
    });
  }

  /**
   * The first shutdown hook: refuse new calls at once (503 shutting_down) rather than after the
   * other modules' destroy hooks (consumers leaving their groups) have run; calls already running
   * go on, and beforeApplicationShutdown waits for them while the bus and the database are open.
   */
  onModuleDestroy(): void {
    this.inFlight.stopAccepting();
  }

  async beforeApplicationShutdown(): Promise<void> {
    const running = this.inFlight.size;
    if (running > 0) this.logger.info('finishing in-flight calls before shutdown', { running });
    const drained = await this.inFlight.drain(Math.max(1_000, this.config.SHUTDOWN_TIMEOUT_MS - 3_000));
    if (!drained) this.logger.warn('in-flight calls still running at the shutdown deadline', { running: this.inFlight.size });
  }
}
