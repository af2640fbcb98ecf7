import { describe, expect, it } from 'vitest';
import type { DataSource } from 'typeorm';
import { In } from 'typeorm';
import { LlmCall, ProcessedEvent, ProcessedEventStore, Rollout } from '@anvil/persistence';
import { EventStore } from '../event-store';
import { llmCall, newRolloutIds, redeliver, rolloutCompleted, rolloutStarted, uid } from '@anvil/contracts/testing';

/**
 * The Data Pool's batch path: one transaction marks a batch of events processed and applies
 * the new ones (llm calls as multi-row inserts), idempotently and all-or-nothing.
 */
export function describeBatchBehaviour(backend: string, dataSource: () => DataSource): void {
  describe(`batch ingestion on ${backend}`, () => {
    it('applies a mixed, ordered batch in one transaction and skips what was processed before', async () => {
      const ds = dataSource();
      const consumer = uid('consumer');
      const processed = new ProcessedEventStore(ds);
      const store = new EventStore(ds);
      const ids = newRolloutIds();
      const calls = Array.from({ length: 5 }, (_, i) => llmCall(ids, { turnIndex: i, callId: uid('call') }));
      const batch = [rolloutStarted(ids), ...calls, rolloutCompleted(ids)];
      const apply = (events: typeof batch) =>
        processed.withEventsOnce(
          consumer,
          events.map((e) => e.id),
          async (m, fresh) => {
            await store.applyEvents(
              events.filter((e) => fresh.has(e.id)),
              m,
            );
          },
        );

      expect((await apply(batch)).size).toBe(7);
      expect(await ds.getRepository(LlmCall).countBy({ rolloutId: ids.rolloutId })).toBe(5);
      expect((await ds.getRepository(Rollout).findOneByOrFail({ id: ids.rolloutId })).status).toBe('completed');

      // A redelivered batch (plus one new call) changes only what is new.
      const extra = llmCall(ids, { turnIndex: 5, callId: uid('call') });
      const fresh = await apply([...batch.map(redeliver), extra]);
      expect([...fresh]).toEqual([extra.id]);
      expect(await ds.getRepository(LlmCall).countBy({ rolloutId: ids.rolloutId })).toBe(6);
      const stored = await ds.getRepository(LlmCall).findOneByOrFail({ id: calls[2].payload.callId });
      expect(Buffer.from(stored.promptIds.buffer).equals(Buffer.from(calls[2].payload.promptDeltaIds.buffer))).toBe(true);
    });

    it('leaves no mark and no row when the batch fails', async () => {
      const ds = dataSource();
      const consumer = uid('consumer');
      const ids = newRolloutIds();
      const calls = Array.from({ length: 3 }, (_, i) => llmCall(ids, { turnIndex: i, callId: uid('call') }));
      await expect(
        new ProcessedEventStore(ds).withEventsOnce(
          consumer,
          calls.map((e) => e.id),
          async (m) => {
            await new EventStore(ds).applyEvents(calls, m);
            throw new Error('crash mid-batch');
          },
        ),
      ).rejects.toThrow('crash mid-batch');
      expect(await ds.getRepository(LlmCall).countBy({ id: In(calls.map((c) => c.payload.callId)) })).toBe(0);
      expect(await ds.getRepository(ProcessedEvent).countBy({ consumer })).toBe(0);
    });
  });
}
