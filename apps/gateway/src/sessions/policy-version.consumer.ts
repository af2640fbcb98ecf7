import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { TOPICS } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import type { Logger } from '@anvil/observability';
import { BackgroundSubscription, EVENT_BUS, LOGGER, ReadinessRegistry } from '@anvil/service-kit';
import type { GatewayConfig } from '../config';
import { GATEWAY_CONFIG, POLICY_VERSIONS } from '../tokens';
import type { PolicyVersionStore } from './policy-version-store';
import type { SchemaGate } from './schema-gate';
import { SCHEMA_GATE } from './schema-gate';

/**
 * Tracks the current policy version from policy_version.activated (group GATEWAY_POLICY_GROUP,
 * read from the beginning so a fresh gateway learns the latest version). The version is written
 * to PostgreSQL, so the gateway instance that happens to own the partition informs all of them;
 * the write is a GREATEST, so redeliveries and reordering are harmless.
 */
@Injectable()
export class PolicyVersionConsumer implements OnModuleInit, OnModuleDestroy {
  private readonly subscription: BackgroundSubscription;

  constructor(
    @Inject(EVENT_BUS) bus: MessageBus,
    @Inject(POLICY_VERSIONS) versions: PolicyVersionStore,
    @Inject(SCHEMA_GATE) schema: SchemaGate,
    @Inject(GATEWAY_CONFIG) config: GatewayConfig,
    @Inject(LOGGER) logger: Logger,
    @Inject(ReadinessRegistry) readiness: ReadinessRegistry,
  ) {
    // Subscribing waits for the broker (and the schema): in the background, so /healthz answers meanwhile.
    this.subscription = new BackgroundSubscription({
      name: 'policy-versions',
      bus,
      logger,
      readiness,
      prepare: () => schema.ready(),
      subscribe: {
        group: config.GATEWAY_POLICY_GROUP,
        topics: [TOPICS.policyVersions],
        fromBeginning: true,
        handler: async (event) => {
          if (event.type !== 'policy_version.activated') return;
          await versions.recordActivation(event.payload.deployment, event.payload.version, new Date(event.payload.activatedAt));
          logger.info('policy version activated', { version: event.payload.version, deployment: event.payload.deployment });
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
