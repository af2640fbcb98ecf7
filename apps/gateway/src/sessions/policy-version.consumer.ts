import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { TOPICS } from '@anvil/contracts';
import type { MessageBus, Subscription } from '@anvil/messaging';
import type { Logger } from '@anvil/observability';
import { EVENT_BUS, LOGGER, ReadinessRegistry } from '@anvil/service-kit';
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
  private subscription: Subscription | null = null;
  private stopped = false;

  constructor(
    @Inject(EVENT_BUS) private readonly bus: MessageBus,
    @Inject(POLICY_VERSIONS) private readonly versions: PolicyVersionStore,
    @Inject(SCHEMA_GATE) private readonly schema: SchemaGate,
    @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
    @Inject(LOGGER) private readonly logger: Logger,
    @Inject(ReadinessRegistry) private readonly readiness: ReadinessRegistry,
  ) {}

  onModuleInit(): void {
    this.readiness.add({
      name: 'policy-versions',
      check: async () => {
        if (!this.subscription) throw new Error('not subscribed to policy_version.activated yet');
      },
    });
    // Subscribing waits for the broker (and the schema): in the background, so /healthz answers meanwhile.
    void this.connect();
  }

  private async connect(): Promise<void> {
    for (let attempt = 1; !this.subscription && !this.stopped; attempt++) {
      try {
        await this.schema.ready();
        this.subscription = await this.bus.subscribe({
          group: this.config.GATEWAY_POLICY_GROUP,
          topics: [TOPICS.policyVersions],
          fromBeginning: true,
          handler: async (event) => {
            if (event.type !== 'policy_version.activated') return;
            await this.versions.recordActivation(event.payload.deployment, event.payload.version, new Date(event.payload.activatedAt));
            this.logger.info('policy version activated', { version: event.payload.version, deployment: event.payload.deployment });
          },
        });
        this.logger.info('policy version consumer subscribed', { group: this.config.GATEWAY_POLICY_GROUP });
      } catch (err) {
        if (this.stopped) return;
        this.logger.warn('policy version consumer not connected yet; retrying', { attempt, err });
        await new Promise((r) => setTimeout(r, Math.min(5_000, 250 * attempt)));
      }
    }
  }

  async onModuleDestroy(): Promise<void> {
    this.stopped = true;
    await this.subscription?.stop({ timeoutMs: 10_000 });
  }
}
