import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createEvent, type EventEnvelope } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import type { Logger } from '@anvil/observability';
import type { PolicyVersionState } from './policy-version';
import type { SwapOutcome, WeightSwapper } from './weight-swapper';

/**
 * weights.published -> swap -> policy_version.activated. A version may be a whole model or a LoRA
 * adapter over a named base (v2): each backend applies what it is given (see loadWeights) or
 * refuses it, which fails the swap like any failed load. Idempotent by version, not only by
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
    // v1 events carry neither field: a whole model
    const { version, checkpointUri, sha256, weights, base } = event.payload;
    const refused = await this.verify(checkpointUri, sha256);
    if (refused) {
      this.logger.error('weights.published refused: the checkpoint does not match its checksum, the active weights stay', {
        version,
        checkpointUri,
        eventId: event.id,
        reason: refused,
      });
      return { status: 'ignored', reason: refused };
    }
    const outcome = await this.swapper.apply({ version, checkpointUri, ...(weights ? { weights } : {}), ...(base ? { base } : {}) });
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

  /**
   * Checks a checkpoint this machine can read against the published sha256 (engine
   * checkpointDigest) before any replica loads it; returns why it is refused, or null. A URI
   * that names no directory on this machine (an external engine's own storage) is left to the
   * backend that loads it.
   */
  private async verify(checkpointUri: string, sha256: string): Promise<string | null> {
    const dir = checkpointUri.startsWith('file://') ? fileURLToPath(checkpointUri) : checkpointUri;
    if (!existsSync(dir)) return null;
    // Imported here: external backends never load the engine's native addon.
    const { checkpointDigest } = await import('@anvil/engine');
    try {
      const actual = await checkpointDigest(dir);
      return actual === sha256
        ? null
        : `checksum mismatch: weights.published says sha256 ${sha256}, the files at ${checkpointUri} give ${actual}`;
    } catch (err) {
      return `checkpoint ${checkpointUri} is unreadable: ${(err as Error).message}`;
    }
  }
}
