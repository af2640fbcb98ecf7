import type { DataSource } from 'typeorm';
import type { AnyEventEnvelope } from '@anvil/contracts';
import { ProcessedEventStore } from '@anvil/persistence';
import { EventStore } from './projections';

/**
 * The Data Pool's write path, free of Nest so benchmarks and the embedded host use the very
 * same code: each event is applied and marked processed for this consumer group in ONE
 * transaction, so a redelivery (the bus is at-least-once) changes nothing.
 */
export class DataPoolIngestion {
  private readonly events: EventStore;
  private readonly processed: ProcessedEventStore;

  constructor(
    dataSource: DataSource,
    private readonly consumer: string,
  ) {
    this.events = new EventStore(dataSource);
    this.processed = new ProcessedEventStore(dataSource);
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
        await this.events.applyEvents(
          events.filter((e) => freshIds.has(e.id)),
          manager,
        );
      },
    );
  }

  /** Returns false when this consumer had already processed the event. */
  ingest(event: AnyEventEnvelope): Promise<boolean> {
    return this.processed.withEventOnce(this.consumer, event.id, async (manager) => {
      await this.events.applyEvent(event, manager);
    });
  }
}
