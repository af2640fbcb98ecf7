import { afterEach, expect, it } from 'vitest';
import { deadLetterTopicOf, encodeFrame, TOPICS, type EventEnvelope } from '@anvil/contracts';
import { HEADERS, type RawRecord } from '@anvil/messaging';
import { buildPack } from '@anvil/rl';
import { readTrainBatch } from '@anvil/train-batch';
import { completed, rollout, uid } from './pool-events';
import { collect, runtime, stopLeftovers, until, type PoolEnv } from './pool-kit';

type Settled = EventEnvelope<'rollout_group.settled'>;

async function batchesOf(env: PoolEnv, runId: string): Promise<{ id: string; trajectory_ids: string[] }[]> {
  return env.ds().query(`SELECT "id", "trajectory_ids" FROM "train_batches" WHERE "id" LIKE $1 ORDER BY "step"`, [`${runId}:%`]);
}

async function queueOf(env: PoolEnv, groupId: string): Promise<Record<string, string>> {
  const rows: { rollout_id: string; status: string; reason: string | null }[] = await env
    .ds()
    .query(`SELECT "rollout_id", "status", "reason" FROM "data_pool_queue" WHERE "group_id" = $1`, [groupId]);
  return Object.fromEntries(rows.map((r) => [r.rollout_id, `${r.status} ${r.reason ?? ''}`.trim()]));
}

/** The "Bad input" list, each handled visibly with nothing else lost. */
export function describePoolBadInput(env: PoolEnv): void {
  afterEach(stopLeftovers);

  it('undecodable events go to the dead-letter topic with their reason, a completion of an unknown rollout after its retries; the events around them still assemble and train', async () => {
    const group = uid('dp');
    const rt = runtime(env, { batchTrajectories: 1, window: { inFlight: 1, window: 1 }, filters: { dropZeroVariance: false } }, group);
    const dead: RawRecord[] = [];
    const dlq = await env.bus().subscribeRaw({
      group: `${group}-dlq`,
      topics: [deadLetterTopicOf(TOPICS.llmCalls, group), deadLetterTopicOf(TOPICS.rollouts, group)],
      fromBeginning: true,
      handler: async (record) => void dead.push(record),
    });
    await rt.start();
    const g = uid('g');
    const r = rollout({ rolloutId: `${g}-r`, groupId: g, groupSize: 1, reward: 1 });
    const ghost = completed({ rolloutId: `${g}-ghost`, groupId: g, reward: 1, numCalls: 0 });
    // on the same keys (partitions) as the good rollout's events, before and between them
    await env.bus().publishRaw(TOPICS.llmCalls, { key: r.started.key, value: Buffer.from('not an ANV1 frame') });
    await env.bus().publishRaw(TOPICS.rollouts, {
      key: r.started.key,
      value: encodeFrame({ ...r.started, payload: { ...r.started.payload, groupSize: -1 } }),
    });
    await env.bus().publish([r.started, ghost, r.calls[0]]);
    await env.bus().publishRaw(TOPICS.llmCalls, { key: r.started.key, value: Buffer.from('ANV1 but truncated') });
    await env.bus().publish([...r.calls.slice(1), r.completed]);
    await until('the good rollout trained', async () => (await batchesOf(env, rt.config.runId)).length === 1);
    expect((await batchesOf(env, rt.config.runId))[0].trajectory_ids).toEqual([`${g}-r`]);
    // the unknown rollout's completion is retried (in process, then through the retry topic) and then dead-lettered
    await until('4 dead letters', () => dead.length >= 4 && dead, 60_000);
    const reasons = dead.map((d) => d.headers[HEADERS.reason]).sort();
    expect(reasons).toEqual(['handler_failed', 'invalid_payload', 'malformed_frame', 'malformed_frame']);
    const failed = dead.find((d) => d.headers[HEADERS.reason] === 'handler_failed');
    expect(failed?.headers[HEADERS.error]).toContain(`${g}-ghost`);
    expect(Number(failed?.headers[HEADERS.attempts])).toBeGreaterThan(1);
    // nothing of the ghost was stored, and no queue row names it
    expect(await env.ds().query(`SELECT 1 FROM "rollouts" WHERE "id" = $1`, [`${g}-ghost`])).toHaveLength(0);
    expect(await queueOf(env, g)).toEqual({ [`${g}-r`]: 'taken' });
    await dlq.stop();
    await rt.stop();
  });

  it('duplicates and out-of-order arrival: calls before their rollout.started and in reverse turn order, a rollout.completed before its calls, every event twice: one row each, the group settles once, the batch tree equals buildPack over the whole samples', async () => {
    const rt = runtime(env, { batchTrajectories: 2, window: { inFlight: 2, window: 2 } });
    const out = await collect(env.bus(), TOPICS.trajectories, uid('obs'));
    await rt.start();
    const g = uid('g');
    const [r0, r1] = [1, 0].map((reward, i) =>
      rollout({ rolloutId: `${g}-r${i}`, groupId: g, groupSize: 2, reward, sampleIndex: i, calls: 4 }),
    );
    const twice = <T>(xs: T[]) => xs.flatMap((x) => [x, x]);
    // r1: its calls (newest first) before its rollout.started; r0: completed before any of its calls
    await env.bus().publish(twice([...r1.calls].reverse()));
    await env.bus().publish(twice([r1.started, r1.completed, r0.started, r0.completed]));
    await until('both rollouts completed in the database', async () => {
      const rows: unknown[] = await env.ds().query(`SELECT 1 FROM "rollouts" WHERE "group_id" = $1 AND "status" = 'completed'`, [g]);
      return rows.length === 2;
    });
    await new Promise((r) => setTimeout(r, 500));
    const settled = () => out.seen.filter((e) => e.type === 'rollout_group.settled' && e.payload.groupId === g) as Settled[];
    expect(settled()).toHaveLength(0); // r0 waits for its calls
    await env.bus().publish(twice([...r0.calls].reverse()));
    await until('settled', () => settled().length === 1);
    const [batch] = await until('the batch', async () => {
      const rows = await batchesOf(env, rt.config.runId);
      return rows.length ? rows : null;
    });
    await new Promise((r) => setTimeout(r, 500)); // room for a second settlement or batch, if any
    expect(settled()).toHaveLength(1);
    expect(out.seen.filter((e) => e.type === 'trajectory.ready' && e.payload.groupId === g)).toHaveLength(2);
    expect(await batchesOf(env, rt.config.runId)).toHaveLength(1);
    const [n]: { n: string }[] = await env.ds().query(`SELECT count(*) AS n FROM "llm_calls" WHERE "group_id" = $1`, [g]);
    expect(Number(n.n)).toBe(8);
    const seen = await collect(env.bus(), TOPICS.trainBatches, uid('obs'));
    const event = (await until('train_batch.created', () =>
      seen.seen.find((x) => x.type === 'train_batch.created' && x.payload.batchId === batch.id),
    )) as EventEnvelope<'train_batch.created'>;
    await seen.stop();
    const tree = await readTrainBatch(event, env.ds());
    const whole = new Map([...r0.v1, ...r1.v1].map((c) => [c.callId, c]));
    const pack = buildPack(
      tree.samples.map((s) => {
        const c = whole.get(s.sampleId);
        if (!c) throw new Error(`sample ${s.sampleId} is not one of the calls published`);
        return { promptIds: c.promptIds, outputIds: c.outputIds };
      }),
    );
    expect(tree.samples).toHaveLength(8);
    expect(Buffer.from(tree.tokens.buffer).equals(Buffer.from(pack.tokens.buffer))).toBe(true);
    expect(Buffer.from(tree.parents.buffer).equals(Buffer.from(pack.parents.buffer))).toBe(true);
    await out.stop();
    await rt.stop();
  });

  it('a call whose parent never arrives and a rollout missing a call: each dropped with its reason after callWaitMs, the rest of the group trains (the batch is not stuck on a tree it cannot build)', async () => {
    const rt = runtime(env, { batchTrajectories: 2, window: { inFlight: 4, window: 4 }, callWaitMs: 300 });
    const out = await collect(env.bus(), TOPICS.trajectories, uid('obs'));
    await rt.start();
    const g = uid('g');
    const rs = [0, 1, 1, 0].map((reward, i) =>
      rollout({ rolloutId: `${g}-r${i}`, groupId: g, groupSize: 4, reward, sampleIndex: i, calls: 3, ...(i === 1 ? { numCalls: 2 } : {}) }),
    );
    // r0 loses its last call (3 announced, 2 arrive); r1 loses its first, and its producer counts the 2 that arrive
    const callsOf = (i: number) => (i === 0 ? rs[0].calls.slice(0, 2) : i === 1 ? rs[1].calls.slice(1) : rs[i].calls);
    await env.bus().publish(rs.flatMap((r, i) => [r.started, ...callsOf(i), r.completed]));
    const settled = (await until('settled', () =>
      out.seen.find((e) => e.type === 'rollout_group.settled' && e.payload.groupId === g),
    )) as Settled;
    expect(settled.payload).toMatchObject({ status: 'ready', retryRolloutIds: [] });
    expect(settled.payload.trajectoryIds.sort()).toEqual([`${g}-r2`, `${g}-r3`]);
    const q = await queueOf(env, g);
    expect(q[`${g}-r0`]).toBe('dropped calls_missing: 2 of 3 calls arrived within 300 ms of rollout.completed');
    expect(q[`${g}-r1`]).toBe(
      'dropped parent_missing: 1 call(s) extend a parent call that did not arrive within 300 ms of rollout.completed',
    );
    const [batch] = await until('the batch', async () => {
      const rows = await batchesOf(env, rt.config.runId);
      return rows.length ? rows : null;
    });
    expect([...batch.trajectory_ids].sort()).toEqual([`${g}-r2`, `${g}-r3`]);
    await out.stop();
    await rt.stop();
  });

  it('a rollout.started that arrives after its group timed out reopens the group: the late rollout settles on its own timeout with its reason instead of holding the queue head forever', async () => {
    // The timeout runs from the rollout's startedAt (set when its events are built), so it must
    // cover delivery of r0's events through Kafka on a loaded machine: at 1 s a CI run timed the
    // group out before r0's completion arrived (settled 'dropped' instead of 'ready' with 1 of 2).
    const rt = runtime(env, {
      batchTrajectories: 1,
      window: { inFlight: 4, window: 1 },
      groupTimeoutMs: 3_000,
      filters: { dropZeroVariance: false },
    });
    const out = await collect(env.bus(), TOPICS.trajectories, uid('obs'));
    await rt.start();
    const g = uid('g');
    const r0 = rollout({ rolloutId: `${g}-r0`, groupId: g, groupSize: 2, reward: 1, sampleIndex: 0 });
    const settledOf = () => out.seen.filter((e) => e.type === 'rollout_group.settled' && e.payload.groupId === g) as Settled[];
    await env.bus().publish([r0.started, ...r0.calls, r0.completed]);
    await until('timed out with one of two', () => settledOf().length === 1, 30_000);
    expect(settledOf()[0].payload).toMatchObject({ status: 'ready', reason: 'timeout: settled with 1 of 2 rollouts' });
    // the late start (it never completes); then a single-rollout group behind it in the queue
    const late = rollout({ rolloutId: `${g}-r1`, groupId: g, groupSize: 2, reward: 1, sampleIndex: 1 });
    const next = uid('g');
    const behind = rollout({ rolloutId: `${next}-r`, groupId: next, groupSize: 1, reward: 1 });
    await env.bus().publish([late.started]);
    // queued behind r0 and ahead of the next group (positions follow arrival)
    await until('the late rollout queued', async () => (await queueOf(env, g))[`${g}-r1`] !== undefined);
    await env.bus().publish([behind.started, ...behind.calls, behind.completed]);
    await until('the late rollout settled', () => settledOf().length === 2, 30_000);
    expect(settledOf()[1].id).not.toBe(settledOf()[0].id);
    expect(settledOf()[1].payload).toMatchObject({ status: 'ready', reason: 'timeout: settled with 1 of 2 rollouts', trajectoryIds: [] });
    expect((await queueOf(env, g))[`${g}-r1`]).toBe('dropped timeout: the rollout never completed');
    // W = 1: the rollout behind it trains only once the late one left the head
    await until(
      'the rollout behind trained',
      async () => (await batchesOf(env, rt.config.runId)).some((b) => b.trajectory_ids.includes(`${next}-r`)),
      30_000,
    );
    await out.stop();
    await rt.stop();
  });
}
