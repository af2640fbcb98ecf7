import type { EventEnvelope } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';

/**
 * Coalesces the events of many concurrent rollouts into one bus.publish (one produce request,
 * one round of acks) per tick: with hundreds of rollouts finishing together, publishing each on
 * its own would make the broker round trip the manager's bottleneck. Each caller still resolves
 * only once its own event is durable; a failed batch rejects every caller in it (they retry).
 */
export class EventBatcher {
  private pending: { event: EventEnvelope; resolve: () => void; reject: (err: unknown) => void }[] = [];
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly bus: MessageBus,
    private readonly opts: { lingerMs: number; maxBatch: number } = { lingerMs: 2, maxBatch: 500 },
  ) {}

  publish(event: EventEnvelope): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pending.push({ event, resolve, reject });
      if (this.pending.length >= this.opts.maxBatch) this.flush();
      else this.timer ??= setTimeout(() => this.flush(), this.opts.lingerMs);
    });
  }

  private flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const batch = this.pending.splice(0, this.opts.maxBatch);
    if (batch.length === 0) return;
    this.bus.publish(batch.map((b) => b.event)).then(
      () => batch.forEach((b) => b.resolve()),
      (err: unknown) => batch.forEach((b) => b.reject(err)),
    );
    if (this.pending.length) this.timer = setTimeout(() => this.flush(), this.opts.lingerMs);
  }
}
