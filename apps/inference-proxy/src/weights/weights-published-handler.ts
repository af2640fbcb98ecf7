import { createEvent, type EventEnvelope } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import type { Logger } from '@anvil/observability';
import type { PolicyVersionState } from './policy-version';
import type { SwapOutcome, WeightSwapper } from './weight-swapper';

/**
 * weights.published -> swap -> policy_version.activated. Idempotent by version, not only by
 * event id: a redelivered event, a second event for the same version or an older version
 * changes nothing (the swapper ignores it). The activation is re-published for the ACTIVE
 * version if it has not gone out yet, so a crash or a failed publish between the swap and the
 * announcement is repaired by the redelivery.
 */
export class WeightsPublishedHandler {
  constructor(
    private readonly swapper: WeightSwapper,
    private readonly versions: PolicyVersionState,
    private readonly bus: MessageBus,
    private readonly deployment: string,
    private readonly logger: Logger,
  ) {}

  async handle(event: EventEnvelope<'weights.published'>): Promise<SwapOutcome> {
    const { version, checkpointUri } = event.payload;
    const outcome = await this.swapper.apply({ version, checkpointUri });
    if (outcome.status === 'ignored') this.logger.info('weights.published ignored', { version, eventId: event.id, reason: outcome.reason });
    if (version === this.versions.current && !this.versions.announced.has(version)) {
      await this.bus.publish(
        createEvent(
          'policy_version.activated',
          { version, deployment: this.deployment, swapPolicy: this.swapper.policy, activatedAt: Date.now() },
          { key: String(version), producer: 'inference-proxy' },
        ),
      );
      this.versions.announced.add(version);
    }
    return outcome;
  }
}
