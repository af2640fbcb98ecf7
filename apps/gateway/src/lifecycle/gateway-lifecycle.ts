import { Inject, Injectable, type BeforeApplicationShutdown, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { Logger } from '@anvil/observability';
import { LOGGER, ReadinessRegistry } from '@anvil/service-kit';
import type { GatewayConfig } from '../config';
import { SCHEMA_GATE, type SchemaGate } from '../sessions/schema-gate';
import type { OutboxRelay } from '../capture/outbox-relay';
import { GATEWAY_CONFIG, IN_FLIGHT, OUTBOX_RELAY } from '../tokens';
import type { InFlightCalls } from './in-flight';

/**
 * Readiness of the gateway's tables, the outbox relay's sweeper, and graceful shutdown: before
 * the HTTP server and then the bus and the database close, running calls finish and their
 * records are published (new calls get 503); records the broker does not take in time stay in
 * the outbox for the next gateway's sweeper.
 */
@Injectable()
export class GatewayLifecycle implements OnModuleInit, OnModuleDestroy, BeforeApplicationShutdown {
  constructor(
    @Inject(IN_FLIGHT) private readonly inFlight: InFlightCalls,
    @Inject(OUTBOX_RELAY) private readonly outbox: OutboxRelay,
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
    this.outbox.start();
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
    const backlog = this.outbox.backlog;
    if (!(await this.outbox.drain(2_000))) this.logger.warn('recorded calls left unpublished in the outbox at shutdown; the next gateway publishes them', { backlog });
  }
}
