import { describe, expect, it } from 'vitest';
import type { DataSource, EntityManager } from 'typeorm';
import {
  Checkpoint,
  LlmCall,
  PolicyActivation,
  PolicyVersion,
  ProcessedEvent,
  ProcessedEventStore,
  Reward,
  Rollout,
  Task,
  TaskSet,
  TrainBatch,
  Trajectory,
} from '@anvil/persistence';
import { recordBatch } from '../../scheduling/batch-log';
import { DataPoolStore } from '../data-pool-store';
import { UnknownRolloutError } from '../errors';
import { EventStore } from '../event-store';
import { TaskStore } from '../task-store';
import {
  llmCall,
  newRolloutIds,
  policyVersionActivated,
  redeliver,
  rolloutCompleted,
  rolloutStarted,
  trainBatchCreated,
  trajectoryReady,
  uid,
  weightsPublished,
} from '@anvil/contracts/testing';

const bytesOf = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

/** A 256k-token call: random ids over the whole int32 range, logprobs with the awkward floats. */
function hugeCallArrays(promptTokens: number, outputTokens: number) {
  const promptIds = new Int32Array(promptTokens);
  const seed = new Uint32Array(promptTokens + 3 * outputTokens);
  for (let i = 0; i < seed.length; i++) seed[i] = (Math.random() * 2 ** 32) >>> 0;
  promptIds.set(new Int32Array(seed.buffer, 0, promptTokens));
  promptIds[0] = -(2 ** 31);
  promptIds[1] = 2 ** 31 - 1;
  const outputIds = new Int32Array(seed.buffer.slice(promptTokens * 4, (promptTokens + outputTokens) * 4));
  // Arbitrary bit patterns as floats: NaNs with payloads, -0, infinities, subnormals.
  const outputLogprobs = new Float32Array(seed.buffer.slice((promptTokens + outputTokens) * 4, (promptTokens + 2 * outputTokens) * 4));
  outputLogprobs.set([-0, -Infinity, 1.4e-45, -3.4028234663852886e38], 0);
  const outputVersions = new Uint32Array(seed.buffer.slice((promptTokens + 2 * outputTokens) * 4));
  outputVersions[0] = 2 ** 32 - 1;
  return { promptIds, outputIds, outputLogprobs, outputVersions };
}

/**
 * Store behaviour shared by the PGlite unit tests and the PostgreSQL integration tests.
 * `dataSource()` returns an initialized DataSource with the migrations applied; tests use
 * fresh ids, so they share it without cleaning up.
 */
export function describeStoreBehaviour(backend: string, dataSource: () => DataSource): void {
  describe(`stores on ${backend}`, () => {
    const stores = () => {
      const ds = dataSource();
      return {
        ds,
        events: new EventStore(ds),
        pool: new DataPoolStore(ds),
        processed: new ProcessedEventStore(ds),
        tasks: new TaskStore(ds),
      };
    };

    it('stores an llm call once however often it is delivered, with every field intact', async () => {
      const { ds, events, pool } = stores();
      const ids = newRolloutIds();
      const call = llmCall(ids, { parentCallId: null, turnIndex: 0 });
      expect(await events.applyEvent(call)).toBe(true);
      expect(await events.applyEvent(redeliver(call))).toBe(false);
      expect(await events.recordLlmCall(redeliver(call))).toBe(false);

      expect(await ds.manager.countBy(LlmCall, { rolloutId: ids.rolloutId })).toBe(1);
      const [row] = await pool.callsOfRollout(ids.rolloutId);
      const p = call.payload;
      expect(row).toMatchObject({
        id: p.callId,
        eventId: call.id,
        sessionId: p.sessionId,
        groupId: ids.groupId,
        taskId: ids.taskId,
        branchId: 'main',
        parentCallId: null,
        model: 'tiny-qwen',
        reusedPromptTokens: 0,
        promptTokens: 4,
        outputTokens: 3,
        finishReason: 'stop',
        sampling: p.sampling,
      });
      expect(row.promptIds).toBeInstanceOf(Int32Array);
      expect(Array.from(row.promptIds)).toEqual([1, 2, 3, 4]);
      expect(row.outputLogprobs).toBeInstanceOf(Float32Array);
      expect(Array.from(row.outputLogprobs)).toEqual([-0.5, -0.5, -0.5]);
      expect(row.outputVersions).toBeInstanceOf(Uint32Array);
      expect(row.receivedAt.getTime()).toBe(p.timings.receivedAt);
      expect(row.firstTokenAt?.getTime()).toBe(p.timings.firstTokenAt);
      expect(row.finishedAt.getTime()).toBe(p.timings.finishedAt);
    });

    it('applies every event type exactly once', async () => {
      const { ds, events } = stores();
      const ids = newRolloutIds();
      const call = llmCall(ids);
      const traj = trajectoryReady(ids, { callIds: [call.payload.callId] });
      const version = 1000 + Math.floor(Math.random() * 1_000_000);
      const all = [
        rolloutStarted(ids),
        call,
        rolloutCompleted(ids, { processRewards: [{ callId: call.payload.callId, value: 0.25, label: 'tool-ok' }] }),
        traj,
        weightsPublished(version),
        policyVersionActivated(version),
      ];
      for (const event of all) {
        expect(await events.applyEvent(event), `${event.type} first delivery`).toBe(true);
        expect(await events.applyEvent(redeliver(event)), `${event.type} redelivery`).toBe(false);
      }
      expect(await ds.manager.countBy(Rollout, { id: ids.rolloutId })).toBe(1);
      expect(await ds.manager.countBy(Reward, { rolloutId: ids.rolloutId })).toBe(2);
      expect(await ds.manager.countBy(Trajectory, { rolloutId: ids.rolloutId })).toBe(1);
      // a train batch is the batch cut's own record, written in the cut's transaction: its event is not projected
      const batch = trainBatchCreated([traj.payload.trajectoryId]);
      expect(await events.applyEvent(batch)).toBe(false);
      expect(await ds.manager.countBy(TrainBatch, { id: batch.payload.batchId })).toBe(0);
      expect(await ds.manager.countBy(PolicyVersion, { version })).toBe(1);
      expect(await ds.manager.countBy(Checkpoint, { version })).toBe(1);
      expect(await ds.manager.countBy(PolicyActivation, { version })).toBe(1);
    });

    it('round-trips a 256k-token call bit-exactly through bytea, 4 bytes a token', async () => {
      const { ds, events, pool } = stores();
      const ids = newRolloutIds();
      const arrays = hugeCallArrays(200_000, 62_144);
      const call = llmCall(ids, { ...arrays });
      expect(await events.applyEvent(call)).toBe(true);

      const [row] = await pool.callsOfRollout(ids.rolloutId);
      for (const key of ['promptIds', 'outputIds', 'outputLogprobs', 'outputVersions'] as const) {
        expect(row[key].constructor).toBe(arrays[key].constructor);
        expect(row[key].length, key).toBe(arrays[key].length);
        expect(bytesOf(row[key]).equals(bytesOf(arrays[key])), `${key} bit-exact`).toBe(true);
      }
      const [sizes] = await ds.query(
        'SELECT octet_length(prompt_ids) AS prompt, octet_length(output_ids) AS output, octet_length(output_logprobs) AS logprobs, octet_length(output_versions) AS versions FROM llm_calls WHERE id = $1',
        [call.payload.callId],
      );
      expect(sizes).toEqual({ prompt: 800_000, output: 248_576, logprobs: 248_576, versions: 248_576 });
    });

    it('answers the query helpers and loads relations', async () => {
      const { ds, events, pool } = stores();
      const ids = newRolloutIds();
      const sibling = { ...ids, rolloutId: uid('rollout') };
      await events.applyEvent(rolloutStarted(sibling, { sampleIndex: 1 }));
      await events.applyEvent(rolloutStarted(ids, { sampleIndex: 0 }));
      // Calls arrive out of turn order (another topic, another partition).
      for (const turn of [2, 0, 1]) await events.applyEvent(llmCall(ids, { turnIndex: turn, callId: `${ids.rolloutId}-t${turn}` }));
      await events.applyEvent(
        rolloutCompleted(ids, {
          outcomeReward: 0.75,
          processRewards: [
            { callId: `${ids.rolloutId}-t0`, value: 0.1 },
            { callId: `${ids.rolloutId}-t1`, value: 0.2, label: 'second' },
          ],
        }),
      );

      expect((await pool.callsOfRollout(ids.rolloutId)).map((c) => c.turnIndex)).toEqual([0, 1, 2]);
      expect((await pool.rolloutsOfGroup(ids.groupId)).map((r) => [r.id, r.sampleIndex, r.status])).toEqual([
        [ids.rolloutId, 0, 'completed'],
        [sibling.rolloutId, 1, 'running'],
      ]);
      expect((await pool.rewardsOfRollout(ids.rolloutId)).map((r) => [r.kind, r.callId, r.value, r.label])).toEqual([
        ['outcome', null, 0.75, null],
        ['process', `${ids.rolloutId}-t0`, 0.1, null],
        ['process', `${ids.rolloutId}-t1`, 0.2, 'second'],
      ]);

      const rollout = await ds.getRepository(Rollout).findOneOrFail({
        where: { id: ids.rolloutId },
        relations: { group: { task: { taskSet: true } } },
      });
      expect(rollout.group?.groupSize).toBe(4);
      expect(rollout.group?.task?.taskSet?.id).toBe(ids.taskSetId);
      // The entities keep only the relations code navigates (rollout -> group -> task -> set,
      // call -> rollout); a rollout's rewards and calls are read by rollout id.
      expect(await ds.getRepository(Reward).countBy({ rolloutId: ids.rolloutId })).toBe(3);
      expect((await ds.getRepository(LlmCall).findBy({ rolloutId: ids.rolloutId })).map((c) => c.turnIndex).sort()).toEqual([0, 1, 2]);
      expect(rollout.completedAt?.getTime()).toBe(1_700_000_100_000);
      expect(rollout.outcomeReward).toBe(0.75);

      const call = await ds.getRepository(LlmCall).findOneOrFail({ where: { id: `${ids.rolloutId}-t1` }, relations: { rollout: true } });
      expect(call.rollout?.id).toBe(ids.rolloutId);
    });

    it('tracks which trajectories are scheduled and the latest policy version', async () => {
      const { ds, events, pool } = stores();
      const ids = newRolloutIds();
      const first = trajectoryReady(ids, { readyAt: 1_000 });
      const second = trajectoryReady(ids, { readyAt: 2_000 });
      const third = trajectoryReady(ids, { readyAt: 3_000 });
      for (const t of [third, first, second]) await events.applyEvent(t);
      const mine = (list: Trajectory[]) => list.filter((t) => t.rolloutId === ids.rolloutId).map((t) => t.id);
      expect(mine(await pool.unscheduledTrajectories())).toEqual([first, second, third].map((t) => t.payload.trajectoryId));

      // the batch cut's one writer of the batch log and the scheduled marks
      const batch = { batchId: uid('batch'), trajectoryIds: [first.payload.trajectoryId, third.payload.trajectoryId] };
      await ds.transaction((m) =>
        recordBatch(m, {
          ...batch,
          eventId: `train_batch.created:${batch.batchId}`,
          step: 7,
          policyVersion: 3,
          sampleIds: batch.trajectoryIds.map((t, i) => `${t}-s${i}`),
          totalTokens: 10,
          createdAt: 1_700_000_300_000,
        }),
      );
      expect(mine(await pool.unscheduledTrajectories())).toEqual([second.payload.trajectoryId]);
      const scheduled = await ds
        .getRepository(Trajectory)
        .findOneOrFail({ where: { id: first.payload.trajectoryId }, relations: { trainBatch: true } });
      expect(scheduled.status).toBe('scheduled');
      expect(scheduled.trainBatch?.id).toBe(batch.batchId);
      expect(scheduled.trainBatch?.numSamples).toBe(2);
      expect(scheduled.trainBatch?.numTokens).toBe('10');
      expect(scheduled.callIds).toEqual([]);

      const top = (await pool.latestPolicyVersion())?.version ?? 0;
      await events.applyEvent(weightsPublished(top + 2));
      await events.applyEvent(weightsPublished(top + 1));
      const latest = await ds.getRepository(PolicyVersion).findOneOrFail({ where: { version: top + 2 }, relations: { checkpoint: true } });
      expect((await pool.latestPolicyVersion())?.version).toBe(top + 2);
      expect(latest.checkpoint?.uri).toBe(`file:///checkpoints/v${top + 2}`);
    });

    it('refuses a completion for a rollout it never saw start, and stores nothing', async () => {
      const { ds, events } = stores();
      const ids = newRolloutIds();
      await expect(events.applyEvent(rolloutCompleted(ids))).rejects.toBeInstanceOf(UnknownRolloutError);
      expect(await ds.manager.countBy(Reward, { rolloutId: ids.rolloutId })).toBe(0);
      // Once the start arrives, the retried completion goes through.
      await events.applyEvent(rolloutStarted(ids));
      expect(await events.applyEvent(rolloutCompleted(ids))).toBe(true);
    });

    it('joins the caller’s transaction and rolls back with it', async () => {
      const { ds, events } = stores();
      const ids = newRolloutIds();
      await expect(
        ds.transaction(async (manager) => {
          await events.applyEvent(rolloutStarted(ids), manager);
          await events.applyEvent(llmCall(ids), manager);
          throw new Error('consumer failed after writing');
        }),
      ).rejects.toThrow('consumer failed');
      expect(await ds.manager.countBy(Rollout, { id: ids.rolloutId })).toBe(0);
      expect(await ds.manager.countBy(LlmCall, { rolloutId: ids.rolloutId })).toBe(0);
    });

    it('withEventOnce runs the work once, and again only if it failed', async () => {
      const { ds, processed } = stores();
      const eventId = uid('event');
      const setId = uid('set');
      const work = (name: string) => async (manager: EntityManager) => {
        await manager.save(TaskSet, { id: setId, name, config: {} });
      };
      await expect(
        processed.withEventOnce('trainer', eventId, async (manager) => {
          await work('failed attempt')(manager);
          throw new Error('side effect failed');
        }),
      ).rejects.toThrow('side effect failed');
      expect(await processed.isProcessed('trainer', eventId)).toBe(false);
      expect(await ds.manager.countBy(TaskSet, { id: setId })).toBe(0);

      expect(await processed.withEventOnce('trainer', eventId, work('first'))).toBe(true);
      expect(await processed.withEventOnce('trainer', eventId, work('second'))).toBe(false);
      expect(await processed.isProcessed('trainer', eventId)).toBe(true);
      expect((await ds.manager.findOneByOrFail(TaskSet, { id: setId })).name).toBe('first');
      // Another consumer has its own record of the same event.
      expect(await processed.withEventOnce('middleware', eventId, () => Promise.resolve())).toBe(true);
      expect(await ds.manager.countBy(ProcessedEvent, { eventId })).toBe(2);
    });

    it('survives concurrent duplicate deliveries: one row, one winner, no errors', async () => {
      const { ds, events } = stores();
      const ids = newRolloutIds();
      const copies = 8;
      const deliverAll = async (event: Parameters<EventStore['applyEvent']>[0]) => {
        const results = await Promise.all(Array.from({ length: copies }, () => events.applyEvent(redeliver(event))));
        return results.filter(Boolean).length;
      };
      // Siblings of one group start together: the group row is created exactly once.
      const siblings = Array.from({ length: 4 }, (_, i) => ({ ...ids, rolloutId: `${ids.rolloutId}-${i}` }));
      await Promise.all(siblings.map((s, i) => events.applyEvent(rolloutStarted(s, { sampleIndex: i }))));

      expect(await deliverAll(rolloutStarted(ids, { sampleIndex: 9 }))).toBe(1);
      expect(await deliverAll(llmCall(ids))).toBe(1);
      expect(
        await deliverAll(
          rolloutCompleted(ids, {
            processRewards: [
              { callId: 'c', value: 1 },
              { callId: 'd', value: 2 },
            ],
          }),
        ),
      ).toBe(1);
      const traj = trajectoryReady(ids);
      expect(await deliverAll(traj)).toBe(1);

      expect(await ds.manager.countBy(Rollout, { groupId: ids.groupId })).toBe(5);
      expect(await ds.manager.countBy(LlmCall, { rolloutId: ids.rolloutId })).toBe(1);
      expect(await ds.manager.countBy(Reward, { rolloutId: ids.rolloutId })).toBe(3);
      expect(await ds.manager.countBy(Trajectory, { rolloutId: ids.rolloutId })).toBe(1);

      const eventId = uid('event');
      let runs = 0;
      const outcomes = await Promise.all(
        Array.from({ length: copies }, () =>
          new ProcessedEventStore(ds).withEventOnce('scheduler', eventId, async () => {
            runs += 1;
          }),
        ),
      );
      expect(outcomes.filter(Boolean)).toHaveLength(1);
      expect(runs).toBe(1);
    });

    it('registers task sets and tasks, filling in the placeholders rollouts created', async () => {
      const { ds, events, tasks } = stores();
      const ids = newRolloutIds();
      await events.applyEvent(rolloutStarted(ids));
      expect(await ds.manager.findOneByOrFail(Task, { id: ids.taskId })).toMatchObject({ taskSetId: ids.taskSetId, spec: {} });

      await tasks.upsertTaskSet({ id: ids.taskSetId, name: 'gsm-tools', config: { split: 'train' } });
      await tasks.upsertTaskSet({ id: ids.taskSetId, name: 'gsm-tools v2', config: { split: 'train', n: 2 } });
      await tasks.upsertTasks(ids.taskSetId, [
        { id: ids.taskId, spec: { prompt: 'add 2 and 2', answer: 4 } },
        { id: `${ids.taskId}-b`, spec: { prompt: 'nested', tools: [{ name: 'calc' }] } },
      ]);
      expect(await ds.manager.findOneByOrFail(TaskSet, { id: ids.taskSetId })).toMatchObject({
        name: 'gsm-tools v2',
        config: { split: 'train', n: 2 },
      });
      expect((await tasks.tasksOfSet(ids.taskSetId)).map((t) => [t.id, t.spec])).toEqual([
        [ids.taskId, { prompt: 'add 2 and 2', answer: 4 }],
        [`${ids.taskId}-b`, { prompt: 'nested', tools: [{ name: 'calc' }] }],
      ]);
    });
  });
}
