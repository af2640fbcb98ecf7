import { describe, expect, it } from 'vitest';
import type { DataSource } from 'typeorm';
import type { AnyEventEnvelope } from '@anvil/contracts';
import { redeliver, rolloutStarted, uid } from '@anvil/contracts/testing';
import { DataPoolIngestion } from '../ingestion';

/**
 * Two waves of rollout.started for one run, ids drawn from `tag`: group A (2 rollouts) and group B
 * (1) with an evaluation start between them; then, after A has settled, A's retry, a redelivery of
 * B's start under a new event id, and B's second rollout.
 */
function waves(tag: string) {
  const ids = (group: string, n: number) => ({
    taskSetId: `${tag}-set`,
    taskId: `${tag}-task-${group}`,
    groupId: `${tag}-group-${group}`,
    rolloutId: `${tag}-r${n}`,
  });
  const start = (group: string, n: number, position: number | undefined, extra: Record<string, unknown> = {}) =>
    rolloutStarted(ids(group, n), {
      groupSize: 2,
      sampleIndex: n,
      startedAt: 1_700_000_000_000 + n * 1000,
      ...(position === undefined ? {} : { queuePosition: position }),
      ...extra,
    });
  const first: AnyEventEnvelope[] = [
    start('a', 1, 1),
    start('a', 2, 2),
    start('e', 9, undefined, { purpose: 'eval', groupId: `eval:${tag}` }),
    start('b', 3, 3),
  ];
  const b3again = { ...redeliver(start('b', 3, 3)), id: uid('event') };
  const second: AnyEventEnvelope[] = [start('a', 4, 4), b3again, start('b', 5, 5)];
  return { first, second, groupA: `${tag}-group-a` };
}

async function poolState(ds: DataSource, runId: string) {
  const groups: { group_id: string; status: string; group_size: number; opened_ms: string }[] = await ds.query(
    `SELECT "group_id", "status", "group_size", (extract(epoch from "opened_at") * 1000)::bigint AS opened_ms FROM "data_pool_groups" WHERE "run_id" = $1 ORDER BY "group_id"`,
    [runId],
  );
  const queue: { rollout_id: string; group_id: string; position: string; submitted_ms: string }[] = await ds.query(
    `SELECT "rollout_id", "group_id", "position", (extract(epoch from "submitted_at") * 1000)::bigint AS submitted_ms FROM "data_pool_queue" WHERE "run_id" = $1 ORDER BY "position"`,
    [runId],
  );
  const strip = (s: string) => s.replace(`${runId}-`, '');
  return {
    groups: groups.map((g) => ({ ...g, group_id: strip(g.group_id), opened_ms: Number(g.opened_ms) })),
    queue: queue.map((q) => ({
      rollout_id: strip(q.rollout_id),
      group_id: strip(q.group_id),
      position: Number(q.position),
      submitted_ms: Number(q.submitted_ms),
    })),
  };
}

export function describeIngestionBehaviour(backend: string, dataSource: () => DataSource): void {
  describe(`Data Pool ingestion of rollout starts on ${backend}`, () => {
    it('queues a batch of starts exactly as it queues them one at a time: groups, positions, reopened groups', async () => {
      const ds = dataSource();
      const results = [];
      for (const mode of ['batch', 'one-by-one'] as const) {
        const runId = uid(mode);
        const ingestion = new DataPoolIngestion(ds, `consumer-${runId}`, runId);
        const { first, second, groupA } = waves(runId);
        const ingest = async (events: AnyEventEnvelope[]) => {
          if (mode === 'batch') await ingestion.ingestBatch(events);
          else for (const e of events) await ingestion.ingest(e);
        };
        await ingest(first);
        await ds.query(`UPDATE "data_pool_groups" SET "status" = 'ready', "settled_at" = now() WHERE "group_id" = $1`, [groupA]);
        await ingest(second);
        results.push(await poolState(ds, runId));
      }
      const [batch, oneByOne] = results;
      expect(batch).toEqual(oneByOne);
      // and what both did: A reopened at its retry's start, B not duplicated, the eval start not queued
      expect(batch.groups.map((g) => [g.group_id, g.status, g.opened_ms])).toEqual([
        ['group-a', 'open', 1_700_000_004_000],
        ['group-b', 'open', 1_700_000_003_000],
      ]);
      expect(batch.queue.map((q) => [q.rollout_id, q.position])).toEqual([
        ['r1', 1],
        ['r2', 2],
        ['r3', 3],
        ['r4', 4],
        ['r5', 5],
      ]);
    });
  });
}
