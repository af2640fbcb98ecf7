import type { DataSource, EntityManager } from 'typeorm';
import { ProcessedEvent } from '../entities/processed-event.entity';
import { insertIgnoringDuplicates } from './transaction';

/**
 * Exactly-once effects for at-least-once delivery: a consumer runs its work for an event
 * and marks the event processed in the same transaction, so a redelivery (or a concurrent
 * duplicate) finds the mark and skips, and a failed attempt leaves no mark behind.
 */
export class ProcessedEventStore {
  constructor(private readonly ds: DataSource) {}

  /**
   * Runs `work` inside one transaction with the processed mark for (consumer, eventId).
   * Returns false, without running it, when the event was already processed. The mark is
   * inserted first: a concurrent duplicate blocks on it until this transaction ends, then
   * skips (commit) or runs (rollback).
   */
  withEventOnce(consumer: string, eventId: string, work: (manager: EntityManager) => Promise<void>): Promise<boolean> {
    return this.ds.transaction(async (manager) => {
      const fresh = await insertIgnoringDuplicates(manager, ProcessedEvent, { consumer, eventId });
      if (fresh === 0) return false;
      await work(manager);
      return true;
    });
  }

  /**
   * The batch form of withEventOnce: one transaction marks every event of the batch and runs
   * `work` with the ids that were not processed before (a redelivered or duplicate id is left
   * out). All or nothing: if `work` throws, no mark stays behind. Returns the fresh ids.
   */
  withEventsOnce(
    consumer: string,
    eventIds: readonly string[],
    work: (manager: EntityManager, fresh: ReadonlySet<string>) => Promise<void>,
  ): Promise<ReadonlySet<string>> {
    const unique = [...new Set(eventIds)];
    return this.ds.transaction(async (manager) => {
      const rows = unique.length
        ? ((
            await manager
              .createQueryBuilder()
              .insert()
              .into(ProcessedEvent)
              .values(unique.map((eventId) => ({ consumer, eventId })))
              .orIgnore()
              .updateEntity(false)
              .returning('event_id AS "eventId"')
              .execute()
          ).raw as { eventId: string }[])
        : [];
      const fresh = new Set(rows.map((r) => r.eventId));
      if (fresh.size > 0) await work(manager, fresh);
      return fresh;
    });
  }

  isProcessed(consumer: string, eventId: string, manager?: EntityManager): Promise<boolean> {
    return (manager ?? this.ds.manager).existsBy(ProcessedEvent, { consumer, eventId });
  }
}
