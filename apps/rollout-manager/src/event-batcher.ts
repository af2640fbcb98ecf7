import type { EventEnvelope } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import { allDone, Coalescer } from './coalescer';

/**
 * Coalesces the events of many concurrent rollouts into one bus.publish (one produce request,
 * one round of acks) per tick: with hundreds of rollouts finishing together, publishing each on
 * its own would make the broker round trip the manager's bottleneck. Each caller still resolves
 * only once its own event is durable; a failed batch rejects every caller in it (they retry).
 */
export class EventBatcher {
  private readonly batches: Coalescer<EventEnvelope, void>;

  constructor(bus: MessageBus, opts: { lingerMs: number; maxBatch: number } = { lingerMs: 2, maxBatch: 500 }) {
    this.batches = new Coalescer<EventEnvelope, void>(async (events) => {
      await bus.publish(events);
      return allDone(events);
    }, opts);
  }

  publish(event: EventEnvelope): Promise<void> {
    return this.batches.push(event);
  }

  /** Publishes until the event is durable (a few tries with backoff; then the error). */
  async publishDurably(event: EventEnvelope): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.publish(event);
        return;
      } catch (err) {
        if (attempt >= 5) throw err;
        await new Promise((res) => setTimeout(res, 200 * 2 ** attempt));
      }
    }
  }
}
