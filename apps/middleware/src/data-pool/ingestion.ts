import type { DataSource, EntityManager } from 'typeorm';
import type { AnyEventEnvelope, EventEnvelope } from '@anvil/contracts';
import { ProcessedEventStore } from '@anvil/persistence';
import { EventStore } from './projections';
import { RolloutQueue } from './rollout-queue';
import { recordTrained } from './trainer-acks';

/**
 * The Data Pool's write path, free of Nest so benchmarks and the embedded host use the very
 * same code: each event is applied and marked processed for this consumer group in ONE
 * transaction, so a redelivery (the bus is at-least-once) changes nothing. Besides the
 * projections (EventStore) it keeps the scheduler's inputs: a queue row per training rollout
 * and a row per group (RolloutQueue), and the trainer's acknowledgements (train_batch.trained).
 * The pool's own train_batch.created comes back on the topic it reads acknowledgements from:
 * it is marked processed and nothing more (the cut wrote what it records).
 */
export class DataPoolIngestion {
  private readonly events: EventStore;
  private readonly processed: ProcessedEventStore;
  private readonly queue: RolloutQueue;

  constructor(
    dataSource: DataSource,
    private readonly consumer: string,
    private readonly runId = 'default',
  ) {
    this.events = new EventStore(dataSource);
    this.processed = new ProcessedEventStore(dataSource);
    this.queue = new RolloutQueue(runId);
  }

  /**
   * The batch path: one transaction marks and applies every event of the batch that this
   * consumer had not processed yet. Returns the ids that were new.
   */
  ingestBatch(events: readonly AnyEventEnvelope[]): Promise<ReadonlySet<string>> {
    return this.processed.withEventsOnce(
      this.consumer,
      events.map((e) => e.id),
      async (manager, freshIds) => {
        const fresh = events.filter((e) => freshIds.has(e.id));
        await this.events.applyEvents(fresh, manager);
        await this.applyToScheduler(fresh, manager);
      },
    );
  }

  /** Returns false when this consumer had already processed the event. */
  ingest(event: AnyEventEnvelope): Promise<boolean> {
    return this.processed.withEventOnce(this.consumer, event.id, async (manager) => {
      await this.events.applyEvent(event, manager);
      await this.applyToScheduler([event], manager);
    });
  }

  /** The scheduler's inputs of these (projected) events: the starts queued together, then the trainer's acknowledgements in order. */
  private async applyToScheduler(events: readonly AnyEventEnvelope[], m: EntityManager): Promise<void> {
    await this.queue.queueStarts(
      events.filter((e): e is EventEnvelope<'rollout.started'> => e.type === 'rollout.started'),
      m,
    );
    for (const e of events) if (e.type === 'train_batch.trained') await recordTrained(m, this.runId, e);
  }
}
