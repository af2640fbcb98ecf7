import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { TOPICS } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import type { Logger } from '@anvil/observability';
import { BackgroundSubscription, EVENT_BUS, LOGGER, ReadinessRegistry } from '@anvil/service-kit';
import type { InferenceProxyConfig } from '../config';
import type { RuntimeHandle } from '../runtime.provider';
import { INFERENCE_CONFIG, INFERENCE_RUNTIME } from '../tokens';
import { WeightsPublishedHandler } from './weights-published-handler';

/**
 * Subscribes to weights.published in the deployment's consumer group (WEIGHTS_CONSUMER_GROUP).
 * Kafka hands each event to ONE member of a group, so one proxy process fronts one replica set;
 * a second deployment (another replica set) uses its own group. A failing swap throws, and the
 * bus retries it (the handler is idempotent by version).
 */
@Injectable()
export class WeightsConsumer implements OnModuleInit, OnModuleDestroy {
  private subscription: BackgroundSubscription | null = null;

  constructor(
    @Inject(EVENT_BUS) private readonly bus: MessageBus,
    @Inject(INFERENCE_RUNTIME) private readonly handle: RuntimeHandle,
    @Inject(INFERENCE_CONFIG) private readonly config: InferenceProxyConfig,
    @Inject(LOGGER) private readonly logger: Logger,
    @Inject(ReadinessRegistry) private readonly readiness: ReadinessRegistry,
  ) {}

  onModuleInit(): void {
    const runtime = this.handle.runtime;
    if (!runtime) return;
    const handler = new WeightsPublishedHandler(
      runtime.swapper,
      runtime.versions,
      this.bus,
      this.config.DEPLOYMENT_NAME,
      this.logger.child({ component: 'weights' }),
    );
    // Subscribing waits for the broker: in the background, so /healthz answers meanwhile.
    this.subscription = new BackgroundSubscription({
      name: 'weights-consumer',
      bus: this.bus,
      logger: this.logger,
      readiness: this.readiness,
      subscribe: {
        group: this.config.WEIGHTS_CONSUMER_GROUP,
        topics: [TOPICS.weights],
        // Only new versions matter; a fresh deployment starts from INITIAL_POLICY_VERSION.
        fromBeginning: false,
        // A swap can take minutes; keep retrying in process rather than reordering versions.
        maxAttempts: 5,
        handler: async (event) => {
          if (event.type !== 'weights.published') return;
          await handler.handle(event);
        },
      },
    }).start();
  }

  async onModuleDestroy(): Promise<void> {
    await this.subscription?.stop();
  }
}
