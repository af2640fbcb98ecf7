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

    it('applies runs of starts and completions as one-at-a-time delivery would: first start and first completion win, rewards with it', async () => {
      const ds = dataSource();
      const store = new EventStore(ds);
      const group = newRolloutIds();
      const members = [0, 1, 2].map((i) => ({ ...group, rolloutId: uid('rollout'), sampleIndex: i }));
      const other = newRolloutIds();
      const process = [
        { callId: uid('call'), value: 0.25, label: 'step' },
        { callId: uid('call'), value: -0.5 },
      ];
      const batch = [
        ...members.map((m) => rolloutStarted(m, { sampleIndex: m.sampleIndex, groupSize: 3, policyVersionAtStart: 7 })),
        rolloutStarted(other),
        rolloutStarted(members[0], { policyVersionAtStart: 99 }), // a second start of the same rollout: the first stands
        rolloutCompleted(members[0], { outcomeReward: 1, processRewards: process, numCalls: 4 }),
        rolloutCompleted(members[1], { outcomeReward: null, finishReason: 'env_error', error: 'tool crashed' }),
        rolloutCompleted(members[0], { outcomeReward: 0 }), // a second completion: the first stands
      ];
      const changed = await ds.transaction((m) => store.applyEvents(batch, m));
      expect(changed).toBe(4 + 2);
      const rollouts = await ds.getRepository(Rollout).findBy({ id: In([...members.map((m) => m.rolloutId), other.rolloutId]) });
      const byId = new Map(rollouts.map((r) => [r.id, r]));
      expect(byId.get(members[0].rolloutId)).toMatchObject({
        status: 'completed',
        outcomeReward: 1,
        numCalls: 4,
        policyVersionAtStart: 7,
        startedEventId: batch[0].id,
        completedEventId: batch[5].id,
      });
      expect(byId.get(members[1].rolloutId)).toMatchObject({
        status: 'completed',
        finishReason: 'env_error',
        error: 'tool crashed',
        outcomeReward: null,
      });
      expect(byId.get(members[2].rolloutId)?.status).toBe('running');
      expect(byId.get(other.rolloutId)?.status).toBe('running');
      const rewards: {
        rollout_id: string;
        call_id: string | null;
        kind: string;
        value: number;
        label: string | null;
        ordinal: number;
        event_id: string;
      }[] = await ds.query(
        `SELECT "rollout_id", "call_id", "kind", "value", "label", "ordinal", "event_id" FROM "rewards" WHERE "rollout_id" = ANY($1::varchar[]) ORDER BY "rollout_id", "ordinal"`,
        [members.map((m) => m.rolloutId)],
      );
      expect(rewards.map((r) => ({ ...r, value: Number(r.value) }))).toEqual([
        { rollout_id: members[0].rolloutId, call_id: null, kind: 'outcome', value: 1, label: null, ordinal: 0, event_id: batch[5].id },
        {
          rollout_id: members[0].rolloutId,
          call_id: process[0].callId,
          kind: 'process',
          value: 0.25,
          label: 'step',
          ordinal: 1,
          event_id: batch[5].id,
        },
        {
          rollout_id: members[0].rolloutId,
          call_id: process[1].callId,
          kind: 'process',
          value: -0.5,
          label: null,
          ordinal: 2,
          event_id: batch[5].id,
        },
      ]);
      // redelivered, the whole run changes nothing
      expect(await ds.transaction((m) => store.applyEvents(batch.map(redeliver), m))).toBe(0);
    });

    it('refuses a run of completions that names a rollout never started, and stores none of them', async () => {
      const ds = dataSource();
      const store = new EventStore(ds);
      const known = newRolloutIds();
      await store.applyEvents([rolloutStarted(known)], ds.manager);
      const stranger = newRolloutIds();
      await expect(ds.transaction((m) => store.applyEvents([rolloutCompleted(known), rolloutCompleted(stranger)], m))).rejects.toThrow(
        stranger.rolloutId,
      );
      expect((await ds.getRepository(Rollout).findOneByOrFail({ id: known.rolloutId })).status).toBe('running');
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
