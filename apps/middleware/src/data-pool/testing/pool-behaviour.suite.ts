import { afterEach, expect, it } from 'vitest';
import { createEvent, encodeEvent, TOPICS, type EventEnvelope } from '@anvil/contracts';
import { sampleEventOf, weightsPublished } from '@anvil/contracts/testing';
import { buildPack } from '@anvil/rl';
import { readTrainBatch, BatchChecksumError } from '@anvil/train-batch';
import { completed, rollout, started, trajectoryCalls, uid } from './pool-events';
import { collect, runtime, stopLeftovers, until, type PoolEnv } from './pool-kit';

export function describePoolBehaviour(env: PoolEnv): void {
  afterEach(stopLeftovers);

  it('hand-built group: GRPO advantages (r - mean) / std through the bus and the database; trajectory.ready and rollout_group.settled published', async () => {
    const g = uid('g');
    const rt = runtime(env, { batchTrajectories: 4, window: { inFlight: 4, window: 4 } });
    const out = await collect(env.bus(), TOPICS.trajectories, uid('obs'));
    await rt.start();
    const rewards = [1, 0, 0.5, 0.5];
    const rs = rewards.map((reward, i) => rollout({ rolloutId: `${g}-r${i}`, groupId: g, groupSize: 4, reward, sampleIndex: i }));
    await env.bus().publish(rs.flatMap((r) => [r.started, ...r.calls, r.completed]));
    const ready = await until('4 trajectory.ready + settled', () => {
      const mine = out.seen.filter((e) => (e.payload as { groupId: string }).groupId === g);
      return mine.length >= 5 && mine;
    });
    // mean 0.5, population std sqrt(0.125) = 0.35355
    const std = Math.sqrt((0.5 ** 2 * 2) / 4);
    const adv = Object.fromEntries(
      ready
        .filter((e) => e.type === 'trajectory.ready')
        .map((e) => [
          (e as EventEnvelope<'trajectory.ready'>).payload.rolloutId,
          (e as EventEnvelope<'trajectory.ready'>).payload.advantage,
        ]),
    );
    rewards.forEach((r, i) => expect(adv[`${g}-r${i}`]).toBeCloseTo((r - 0.5) / (std + 1e-6), 5));
    const settled = ready.find((e) => e.type === 'rollout_group.settled') as EventEnvelope<'rollout_group.settled'>;
    expect(settled.payload).toMatchObject({ groupId: g, status: 'ready', reason: null, retryRolloutIds: [] });
    expect(settled.payload.trajectoryIds.sort()).toEqual(rs.map((r) => r.started.payload.rolloutId).sort());
    const rows: { advantage: number }[] = await env
      .ds()
      .query(`SELECT "advantage" FROM "trajectories" WHERE "group_id" = $1 ORDER BY "id"`, [g]);
    expect(rows.map((r) => Number(r.advantage))).toEqual(rewards.map((r) => expect.closeTo((r - 0.5) / (std + 1e-6), 5)));
    await out.stop();
    await rt.stop();
  });

  it('process rewards: each call of the batch carries its rollout advantage + λ(p − mean p of that call position) (dr_grpo, λ = 0.5); the trajectory row keeps the outcome advantage', async () => {
    const g = uid('g');
    const rt = runtime(env, {
      batchTrajectories: 2,
      window: { inFlight: 2, window: 2 },
      advantage: { estimator: 'dr_grpo', processRewardWeight: 0.5 },
    });
    await rt.start();
    // rollout 0: reward 1, calls [1, 1]; rollout 1: reward 0, calls [1, 0] -> mean R 0.5; per call position: call 0 mean 1, call 1 mean 0.5
    const rs = [
      rollout({ rolloutId: `${g}-r0`, groupId: g, groupSize: 2, reward: 1, sampleIndex: 0, processRewards: [1, 1] }),
      rollout({ rolloutId: `${g}-r1`, groupId: g, groupSize: 2, reward: 0, sampleIndex: 1, processRewards: [1, 0] }),
    ];
    await env.bus().publish(rs.flatMap((r) => [r.started, ...r.calls, r.completed]));
    const seen = await collect(env.bus(), TOPICS.trainBatches, uid('obs'));
    const event = (await until('train_batch.created', () =>
      seen.seen.find((x) => x.type === 'train_batch.created' && x.payload.runId === rt.config.runId),
    )) as EventEnvelope<'train_batch.created'>;
    await seen.stop();
    const tree = await readTrainBatch(event, env.ds());
    const bySample = Object.fromEntries(tree.samples.map((s) => [s.sampleId, s.advantage]));
    expect(bySample).toEqual({
      [`${g}-r0-call-0`]: expect.closeTo(0.5, 6),
      [`${g}-r0-call-1`]: expect.closeTo(0.5 + 0.5 * 0.5, 6),
      [`${g}-r1-call-0`]: expect.closeTo(-0.5, 6),
      [`${g}-r1-call-1`]: expect.closeTo(-0.5 - 0.5 * 0.5, 6),
    });
    const rows: { advantage: number; call_advantages: number[] | null }[] = await env
      .ds()
      .query(`SELECT "advantage", "call_advantages" FROM "trajectories" WHERE "group_id" = $1 ORDER BY "id"`, [g]);
    expect(rows.map((r) => Number(r.advantage))).toEqual([0.5, -0.5]);
    expect(rows.every((r) => r.call_advantages?.length === 2)).toBe(true);
    await rt.stop();
  });

  it('reinforce_pp: a group divides by the std of its batch, itself and the most recently opened groups already ready', async () => {
    const a = uid('g');
    const b = uid('g');
    const rt = runtime(env, { batchTrajectories: 5, window: { inFlight: 5, window: 5 }, advantage: { estimator: 'reinforce_pp' } });
    const out = await collect(env.bus(), TOPICS.trajectories, uid('obs'));
    await rt.start();
    const advOf = async (g: string, n: number) => {
      const ready = await until(`${n} trajectory.ready of ${g}`, () => {
        const mine = out.seen.filter(
          (e) => e.type === 'trajectory.ready' && e.payload.groupId === g,
        ) as EventEnvelope<'trajectory.ready'>[];
        return mine.length >= n && mine;
      });
      return Object.fromEntries(ready.map((e) => [e.payload.rolloutId, e.payload.advantage]));
    };
    const ra = [1, 0].map((reward, i) => rollout({ rolloutId: `${a}-r${i}`, groupId: a, groupSize: 2, reward, sampleIndex: i }));
    await env.bus().publish(ra.flatMap((r) => [r.started, ...r.calls, r.completed]));
    // the first group has no ready peers: its batch is itself (centred ±0.5, std 0.5)
    const advA = await advOf(a, 2);
    expect(advA[`${a}-r0`]).toBeCloseTo(1, 5);
    expect(advA[`${a}-r1`]).toBeCloseTo(-1, 5);
    const rb = [0.75, 0.25, 0.5].map((reward, i) => rollout({ rolloutId: `${b}-r${i}`, groupId: b, groupSize: 3, reward, sampleIndex: i }));
    await env.bus().publish(rb.flatMap((r) => [r.started, ...r.calls, r.completed]));
    // 5 trajectories a batch: the second group's batch is itself and the first (ceil(5/3) - 1 = 1 peer group):
    // centred [0.25, -0.25, 0] and [0.5, -0.5], std sqrt(0.625 / 5); its own std alone would be sqrt(0.125 / 3)
    const advB = await advOf(b, 3);
    const s = Math.sqrt(0.625 / 5);
    expect(advB[`${b}-r0`]).toBeCloseTo(0.25 / (s + 1e-6), 5);
    expect(advB[`${b}-r1`]).toBeCloseTo(-0.25 / (s + 1e-6), 5);
    expect(advB[`${b}-r2`]).toBeCloseTo(0, 5);
    await out.stop();
    await rt.stop();
  });

  it('compact filter: max_steps and max_context are masked (weight 0) but kept; completed is not; an env_error rollout is dropped and asked to be retried', async () => {
    const g = uid('g');
    const rt = runtime(env, { batchTrajectories: 4, window: { inFlight: 5, window: 5 } });
    const out = await collect(env.bus(), TOPICS.trajectories, uid('obs'));
    await rt.start();
    const reasons = ['completed', 'max_steps', 'max_context', 'completed', 'env_error'] as const;
    const rewards = [1, 0, 0, 0, null];
    const rs = reasons.map((finishReason, i) =>
      rollout({ rolloutId: `${g}-r${i}`, groupId: g, groupSize: 5, reward: rewards[i], finishReason, sampleIndex: i }),
    );
    await env.bus().publish(rs.flatMap((r) => [r.started, ...r.calls, r.completed]));
    const settled = await until(
      'settled',
      () =>
        out.seen.find((e) => e.type === 'rollout_group.settled' && e.payload.groupId === g) as
          EventEnvelope<'rollout_group.settled'> | undefined,
    ).catch(async (err) => {
      const q = await env
        .ds()
        .query(
          `SELECT q."rollout_id", q."run_id", q."status", r."status" AS rs, r."num_calls", (SELECT count(*) FROM "llm_calls" c WHERE c."rollout_id" = q."rollout_id") AS calls FROM "data_pool_queue" q LEFT JOIN "rollouts" r ON r."id" = q."rollout_id" WHERE q."group_id" = $1`,
          [g],
        );
      const gr = await env.ds().query(`SELECT * FROM "data_pool_groups" WHERE "group_id" = $1`, [g]);
      throw new Error(
        `${(err as Error).message}: queue ${JSON.stringify(q)} groups ${JSON.stringify(gr)} tick ${JSON.stringify(rt.lastTick)} run ${rt.config.runId}`,
      );
    });
    expect(settled.payload.retryRolloutIds).toEqual([`${g}-r4`]);
    const masked = Object.fromEntries(
      out.seen
        .filter((e) => e.type === 'trajectory.ready' && e.payload.groupId === g)
        .map((e) => [
          (e as EventEnvelope<'trajectory.ready'>).payload.rolloutId,
          (e as EventEnvelope<'trajectory.ready'>).payload.lossMasked,
        ]),
    );
    expect(masked).toEqual({ [`${g}-r0`]: false, [`${g}-r1`]: true, [`${g}-r2`]: true, [`${g}-r3`]: false });
    // the statistics leave the masked ones out: mean of [1, 0] = 0.5, advantages +-1 (std 0.5)
    const adv = out.seen
      .filter((e) => e.type === 'trajectory.ready' && e.payload.groupId === g)
      .map((e) => [(e as EventEnvelope<'trajectory.ready'>).payload.rolloutId, (e as EventEnvelope<'trajectory.ready'>).payload.advantage]);
    expect(Object.fromEntries(adv)[`${g}-r0`]).toBeCloseTo(1, 4);
    expect(Object.fromEntries(adv)[`${g}-r3`]).toBeCloseTo(-1, 4);
    // batch of 4: masked samples carry loss weight 0
    const batches = await until(
      'a batch',
      async () =>
        (await rt.settle()).length > 0 ||
        (await env.ds().query(`SELECT count(*) AS n FROM "data_pool_batch_stats" WHERE "run_id" = $1`, [rt.config.runId]))[0].n > 0,
    );
    expect(batches).toBeTruthy();
    const [b]: { sample_ids: string[]; id: string }[] = await env
      .ds()
      .query(`SELECT "id", "sample_ids" FROM "train_batches" WHERE "id" LIKE $1`, [`${rt.config.runId}:%`]);
    expect(b.sample_ids.length).toBe(8);
    const [st]: { stats: { lossMasked: number } }[] = await env
      .ds()
      .query(`SELECT "stats" FROM "data_pool_batch_stats" WHERE "batch_id" = $1`, [b.id]);
    expect(st.stats.lossMasked).toBe(2);
    await out.stop();
    await rt.stop();
  });

  it('zero-variance drop: equal rewards drop the group (off by one: one different reward keeps it)', async () => {
    const rt = runtime(env, { batchTrajectories: 3, window: { inFlight: 6, window: 6 } });
    const out = await collect(env.bus(), TOPICS.trajectories, uid('obs'));
    await rt.start();
    const same = uid('g');
    const differs = uid('g');
    const a = [0.5, 0.5, 0.5].map((reward, i) =>
      rollout({ rolloutId: `${same}-r${i}`, groupId: same, groupSize: 3, reward, sampleIndex: i }),
    );
    const b = [0.5, 0.5, 0.5 + 1e-3].map((reward, i) =>
      rollout({ rolloutId: `${differs}-r${i}`, groupId: differs, groupSize: 3, reward, sampleIndex: i }),
    );
    await env.bus().publish([...a, ...b].flatMap((r) => [r.started, ...r.calls, r.completed]));
    const s1 = await until(
      'same settled',
      () =>
        out.seen.find((e) => e.type === 'rollout_group.settled' && e.payload.groupId === same) as
          EventEnvelope<'rollout_group.settled'> | undefined,
    );
    const s2 = await until(
      'differs settled',
      () =>
        out.seen.find((e) => e.type === 'rollout_group.settled' && e.payload.groupId === differs) as
          EventEnvelope<'rollout_group.settled'> | undefined,
    );
    expect(s1.payload).toMatchObject({ status: 'dropped', reason: 'zero_variance', trajectoryIds: [] });
    expect(s2.payload).toMatchObject({ status: 'ready', reason: null });
    expect(s2.payload.trajectoryIds).toHaveLength(3);
    // dropped trajectories leave the queue: the position moves past them and the other group's batch is cut
    await until(
      'batch',
      async () =>
        Number((await env.ds().query(`SELECT count(*) AS n FROM "train_batches" WHERE "id" LIKE $1`, [`${rt.config.runId}:%`]))[0].n) === 1,
    );
    const [q]: { dropped: string; taken: string }[] = await env
      .ds()
      .query(
        `SELECT count(*) FILTER (WHERE "status" = 'dropped') AS dropped, count(*) FILTER (WHERE "status" = 'taken') AS taken FROM "data_pool_queue" WHERE "run_id" = $1`,
        [rt.config.runId],
      );
    expect([Number(q.dropped), Number(q.taken)]).toEqual([3, 3]);
    await out.stop();
    await rt.stop();
  });

  it('group timeout: a group waits for a rollout that is still running, then settles with the rollouts it has once groupTimeoutMs passed', async () => {
    const g = uid('g');
    const rt = runtime(env, { batchTrajectories: 2, window: { inFlight: 3, window: 3 }, groupTimeoutMs: 2_500 });
    const out = await collect(env.bus(), TOPICS.trajectories, uid('obs'));
    await rt.start();
    const rs = [1, 0, 1].map((reward, i) => rollout({ rolloutId: `${g}-r${i}`, groupId: g, groupSize: 3, reward, sampleIndex: i }));
    // r2 starts and never completes
    await env.bus().publish([...rs.slice(0, 2).flatMap((r) => [r.started, ...r.calls, r.completed]), rs[2].started]);
    await until(
      '2 rollouts completed in the database',
      async () =>
        Number(
          (await env.ds().query(`SELECT count(*) AS n FROM "rollouts" WHERE "group_id" = $1 AND "status" = 'completed'`, [g]))[0].n,
        ) === 2,
    );
    await new Promise((r) => setTimeout(r, 500));
    expect(out.seen.find((e) => e.type === 'rollout_group.settled' && e.payload.groupId === g)).toBeUndefined();
    const settled = await until(
      'settled after the timeout',
      () =>
        out.seen.find((e) => e.type === 'rollout_group.settled' && e.payload.groupId === g) as
          EventEnvelope<'rollout_group.settled'> | undefined,
      30_000,
    );
    expect(settled.payload).toMatchObject({ status: 'ready', reason: 'timeout: settled with 2 of 3 rollouts' });
    expect(settled.payload.trajectoryIds.sort()).toEqual([`${g}-r0`, `${g}-r1`]);
    await out.stop();
    await rt.stop();
  });
  it('window: a slow head blocks completed work beyond W and releases it when it completes', async () => {
    const rt = runtime(env, { batchTrajectories: 1, window: { inFlight: 4, window: 2 }, filters: { dropZeroVariance: false } });
    await rt.start();
    // four single-rollout groups at positions 0..3; position 0 is slow
    const ids = [0, 1, 2, 3].map(() => uid('g'));
    const rs = ids.map((g, i) => rollout({ rolloutId: `${g}-r`, groupId: g, groupSize: 1, reward: 1, queuePosition: i }));
    await env.bus().publish(rs.map((r) => r.started));
    // all four queued before anything completes: on Kafka the starts sit on different partitions, and a
    // completion ingested before position 0's start would find position 1 at the head (nothing out of order)
    await until(
      'four queue rows',
      async () =>
        Number((await env.ds().query(`SELECT count(*) AS n FROM "data_pool_queue" WHERE "run_id" = $1`, [rt.config.runId]))[0].n) === 4,
    );
    await env.bus().publish(rs.slice(1).flatMap((r) => [...r.calls, r.completed]));
    const taken = async () =>
      (
        await env
          .ds()
          .query(`SELECT "rollout_id" FROM "data_pool_queue" WHERE "run_id" = $1 AND "status" = 'taken' ORDER BY "batch_id"`, [
            rt.config.runId,
          ])
      ).map((r: { rollout_id: string }) => r.rollout_id);
    await until('position 1 taken (inside the window [0, 1])', async () => (await taken()).length === 1);
    await new Promise((r) => setTimeout(r, 800));
    await rt.settle();
    expect(await taken()).toEqual([rs[1].started.payload.rolloutId]); // 2 and 3 are completed but blocked
    const [blocked]: { n: string }[] = await env
      .ds()
      .query(`SELECT count(*) AS n FROM "data_pool_queue" WHERE "run_id" = $1 AND "status" = 'completed'`, [rt.config.runId]);
    expect(Number(blocked.n)).toBe(2);
    await env.bus().publish([...rs[0].calls, rs[0].completed]);
    await until('all four taken', async () => (await taken()).length === 4);
    const stats: { stats: { outOfOrder: { max: number } } }[] = await env
      .ds()
      .query(`SELECT "stats" FROM "data_pool_batch_stats" WHERE "run_id" = $1 ORDER BY "step"`, [rt.config.runId]);
    expect(stats[0].stats.outOfOrder.max).toBe(1); // position 1 taken with the head (0) unconsumed
    await rt.stop();
  });

  it('adaptive window: while the trainer waits for a batch (its last acknowledgement newer than the last batch), W widens past a slow head before that head completes', async () => {
    // base W 1, no mix gate: only the trainer's wait can widen it (patience: a notch per 0.25 x the usual step interval)
    const rt = runtime(env, {
      batchTrajectories: 1,
      window: { inFlight: 4, window: 'adaptive', adaptive: { min: 1, initial: 1, max: 4, mixGate: 0, patience: 0.25 } },
      filters: { dropZeroVariance: false },
    });
    await rt.start();
    const runId = rt.config.runId;
    const rs = [0, 1, 2, 3].map((i) =>
      rollout({ rolloutId: `${uid('g')}-r`, groupId: uid('g'), groupSize: 1, reward: 1, queuePosition: i }),
    );
    await env.bus().publish(rs.map((r) => r.started));
    await until(
      'four queue rows',
      async () => Number((await env.ds().query(`SELECT count(*) AS n FROM "data_pool_queue" WHERE "run_id" = $1`, [runId]))[0].n) === 4,
    );
    const statusOf = async (i: number) =>
      (
        (await env.ds().query(`SELECT "status" FROM "data_pool_queue" WHERE "rollout_id" = $1`, [rs[i].started.payload.rolloutId])) as {
          status: string;
        }[]
      )[0]?.status;
    // Two batches in order, 300 ms apart: the controller learns the usual step interval.
    await env.bus().publish([...rs[0].calls, rs[0].completed]);
    await until('position 0 taken', async () => (await statusOf(0)) === 'taken');
    await new Promise((r) => setTimeout(r, 300));
    await env.bus().publish([...rs[1].calls, rs[1].completed]);
    await until('position 1 taken', async () => (await statusOf(1)) === 'taken');
    // Position 2 stays running; 3 completes behind it, outside W = 1 ([2, 2]).
    await env.bus().publish([...rs[3].calls, rs[3].completed]);
    await until('position 3 completed', async () => (await statusOf(3)) === 'completed');
    await new Promise((r) => setTimeout(r, 600));
    await rt.settle();
    expect(await statusOf(3)).toBe('completed'); // blocked: the trainer has not asked for more (batch 1 unacknowledged)
    // The trainer acknowledges batch 1 and waits: after a notch or two of patience W covers position 3.
    const [b1]: { batch_id: string; step: number }[] = await env
      .ds()
      .query(`SELECT "batch_id", "step" FROM "data_pool_batch_stats" WHERE "run_id" = $1 AND "step" = 1`, [runId]);
    const base = sampleEventOf('train_batch.trained', b1.batch_id, b1.step) as EventEnvelope<'train_batch.trained'>;
    await env.bus().publish([
      createEvent(
        'train_batch.trained',
        {
          ...base.payload,
          batchId: b1.batch_id,
          batchStep: b1.step,
          runId,
          policyVersion: 2,
          trajectoryIds: [rs[1].started.payload.rolloutId],
          groupIds: [],
          checkpointed: false,
        },
        { key: b1.batch_id, producer: 'trainer' },
      ),
    ]);
    await until('position 3 taken while the head (2) still runs', async () => (await statusOf(3)) === 'taken', 10_000);
    expect(await statusOf(2)).toBe('pending');
    const [stats]: { stats: { outOfOrder: { max: number }; trainerWaitMs: number } }[] = await env
      .ds()
      .query(`SELECT "stats" FROM "data_pool_batch_stats" WHERE "run_id" = $1 AND "step" = 2`, [runId]);
    expect(stats.stats.outOfOrder.max).toBe(1);
    expect(stats.stats.trainerWaitMs).toBeGreaterThan(0);
    await rt.stop();
  });

  it('linear in unique tokens: a 100-call trajectory growing to ~200k tokens; bytes on the bus and in the database are O(unique), the tree read back equals buildPack over the materialised samples', async () => {
    const g = uid('g');
    const r = `${g}-r`;
    const calls = trajectoryCalls({ rolloutId: r, groupId: g, calls: 100, firstPrompt: 1000, newTokens: 1980, outputTokens: 20 });
    const promptTotal = calls.v1.reduce((a, c) => a + c.promptIds.length, 0);
    const unique = calls.v1[99].promptIds.length + calls.v1[99].outputIds.length;
    const outputs = calls.v1.reduce((a, c) => a + c.outputIds.length, 0);
    expect(unique).toBeGreaterThan(195_000);
    expect(promptTotal).toBeGreaterThan(9_000_000); // what v1 would carry
    const raw = 4 * (unique - outputs) + 12 * outputs; // 4 bytes a prompt token + 12 an output token
    const kafkaBytes = calls.v2.reduce((a, e) => a + encodeEvent(e).length, 0);
    expect(kafkaBytes).toBeLessThan(1.2 * raw + 100 * 2048); // + per-event header
    expect(kafkaBytes).toBeGreaterThan(raw);
    const rt = runtime(env, { batchTrajectories: 1, window: { inFlight: 1, window: 1 }, filters: { dropZeroVariance: false } });
    await rt.start();
    await env
      .bus()
      .publish([
        started({ rolloutId: r, groupId: g, groupSize: 1 }),
        ...calls.v2,
        completed({ rolloutId: r, groupId: g, reward: 1, numCalls: 100 }),
      ]);
    const [batch] = await until(
      'batch',
      async () => {
        const rows: { id: string }[] = await env
          .ds()
          .query(`SELECT "id" FROM "train_batches" WHERE "id" LIKE $1`, [`${rt.config.runId}:%`]);
        return rows.length ? rows : null;
      },
      120_000,
    );
    const [stored]: { bytes: string }[] = await env
      .ds()
      .query(
        `SELECT sum(octet_length("prompt_ids") + octet_length("output_ids") + octet_length("output_logprobs") + octet_length("output_versions")) AS bytes FROM "llm_calls" WHERE "rollout_id" = $1`,
        [r],
      );
    expect(Number(stored.bytes)).toBe(raw); // exactly: deltas + outputs, nothing repeated
    const [blob]: { bytes: number }[] = await env.ds().query(`SELECT "bytes" FROM "train_batch_blobs" WHERE "batch_id" = $1`, [batch.id]);
    expect(blob.bytes).toBeLessThan(1.2 * 20 * unique); // 20 bytes a node + per-sample metadata
    // one query rebuilds any call's whole prompt
    expect(Array.from(await rt.pool.calls.fullPrompt(`${r}-call-99`))).toEqual(Array.from(calls.v1[99].promptIds));
    expect(Array.from(await rt.pool.calls.fullPrompt(`${r}-call-37`))).toEqual(Array.from(calls.v1[37].promptIds));
    // the tree a trainer reads back equals the packer's tree over the fully materialised samples
    const event = await until('train_batch.created', async () => {
      const seen = await collect(env.bus(), TOPICS.trainBatches, uid('obs'));
      const e = await until(
        'event',
        () => seen.seen.find((x) => x.type === 'train_batch.created' && x.payload.batchId === batch.id),
        30_000,
      ).catch(() => null);
      await seen.stop();
      return e as EventEnvelope<'train_batch.created'> | null;
    });
    expect(event.version).toBe(2);
    expect(encodeEvent(event).length).toBeLessThan(64 * 1024);
    const tree = await readTrainBatch(event, env.ds());
    const pack = buildPack(calls.v1.map((c) => ({ promptIds: c.promptIds, outputIds: c.outputIds })));
    expect(tree.tokens.length).toBe(unique);
    expect(Buffer.from(tree.tokens.buffer).equals(Buffer.from(pack.tokens.buffer))).toBe(true);
    expect(Buffer.from(tree.parents.buffer).equals(Buffer.from(pack.parents.buffer))).toBe(true);
    expect(Buffer.from(tree.lossWeight.buffer).equals(Buffer.from(pack.lossWeights.buffer))).toBe(true);
    expect(tree.samples.map((s) => Array.from(s.outputNodes))).toEqual(pack.outputNodes.map((o) => Array.from(o)));
    expect(tree.samples.every((s) => s.advantage === 0)).toBe(true); // a group of one: zero variance, kept
    // corrupt blob: refused with a typed error, marked, re-cut under a new batch id
    await env
      .ds()
      .query(`UPDATE "train_batch_blobs" SET "blob" = overlay("blob" placing '\\xff'::bytea from 200 for 1) WHERE "batch_id" = $1`, [
        batch.id,
      ]);
    await expect(readTrainBatch(event, env.ds())).rejects.toBeInstanceOf(BatchChecksumError);
    const recut = await until('re-cut', async () => {
      const rows: { id: string }[] = await env
        .ds()
        .query(`SELECT "id" FROM "train_batches" WHERE "id" LIKE $1 AND "id" <> $2`, [`${rt.config.runId}:%`, batch.id]);
      return rows[0];
    });
    expect(recut.id).toBe(`${rt.config.runId}:batch:1`);
    await rt.stop();
  });

  it('v1 events still ingest (cut to deltas), unknown-rollout and duplicate events change nothing, eval rollouts are never queued', async () => {
    const g = uid('g');
    const r = `${g}-r`;
    const calls = trajectoryCalls({ rolloutId: r, groupId: g, calls: 3, firstPrompt: 5, newTokens: 4, outputTokens: 3 });
    const rt = runtime(env, { batchTrajectories: 1, window: { inFlight: 1, window: 1 }, filters: { dropZeroVariance: false } });
    await rt.start();
    const ev = started({ rolloutId: `${g}-eval`, groupId: `${g}-evalg`, groupSize: 1, purpose: 'eval' });
    await env
      .bus()
      .publish([
        started({ rolloutId: r, groupId: g, groupSize: 1 }),
        ev,
        ...calls.v1Events,
        ...calls.v1Events,
        completed({ rolloutId: r, groupId: g, reward: 1, numCalls: 3 }),
      ]);
    await until(
      'batch',
      async () =>
        Number((await env.ds().query(`SELECT count(*) AS n FROM "train_batches" WHERE "id" LIKE $1`, [`${rt.config.runId}:%`]))[0].n) === 1,
    );
    const rows: { prompt_prefix_tokens: number; n: number }[] = await env
      .ds()
      .query(
        `SELECT "prompt_prefix_tokens", octet_length("prompt_ids") / 4 AS n FROM "llm_calls" WHERE "rollout_id" = $1 ORDER BY "turn_index"`,
        [r],
      );
    expect(rows.map((x) => [x.prompt_prefix_tokens, Number(x.n)])).toEqual([
      [0, 5],
      [8, 4],
      [15, 4],
    ]);
    expect(Array.from(await rt.pool.calls.fullPrompt(`${r}-call-2`))).toEqual(Array.from(calls.v1[2].promptIds));
    const q: unknown[] = await env.ds().query(`SELECT 1 FROM "data_pool_queue" WHERE "rollout_id" = $1`, [`${g}-eval`]);
    expect(q).toHaveLength(0);
    await rt.stop();
  });

  it('retention: prune drops only batches behind the newest full checkpoint (the resume point); weight-only versions past a batch keep its blob, calls and batch-log entry', async () => {
    const rt = runtime(env, { batchTrajectories: 1, window: { inFlight: 6, window: 6 }, filters: { dropZeroVariance: false } });
    await rt.start();
    const runId = rt.config.runId;
    // six single-rollout groups at positions 0..5: batches 0..5, one rollout each
    const rs = [0, 1, 2, 3, 4, 5].map((i) =>
      rollout({ rolloutId: `${uid('g')}-r`, groupId: uid('g'), groupSize: 1, reward: 1, queuePosition: i }),
    );
    await env.bus().publish(rs.flatMap((r) => [r.started, ...r.calls, r.completed]));
    await until(
      '6 batches',
      async () =>
        Number((await env.ds().query(`SELECT count(*) AS n FROM "data_pool_batch_stats" WHERE "run_id" = $1`, [runId]))[0].n) === 6,
    );
    const batches: { batch_id: string; step: number; rollout_id: string }[] = await env
      .ds()
      .query(
        `SELECT s."batch_id", s."step", q."rollout_id" FROM "data_pool_batch_stats" s JOIN "data_pool_queue" q ON q."batch_id" = s."batch_id" WHERE s."run_id" = $1 ORDER BY s."step"`,
        [runId],
      );
    expect(batches.map((b) => b.step)).toEqual([0, 1, 2, 3, 4, 5]);
    // the trainer acknowledges a batch (train_batch.trained) after training it; checkpointed = a full checkpoint was written right after it
    const trained = (b: (typeof batches)[number], policyVersion: number, checkpointed: boolean) => {
      const base = sampleEventOf('train_batch.trained', b.batch_id, b.step) as EventEnvelope<'train_batch.trained'>;
      return createEvent(
        'train_batch.trained',
        {
          ...base.payload,
          batchId: b.batch_id,
          batchStep: b.step,
          runId,
          policyVersion,
          trajectoryIds: [b.rollout_id],
          groupIds: [],
          checkpointed,
        },
        { key: b.batch_id, producer: 'trainer' },
      );
    };
    const acked = async (events: EventEnvelope<'train_batch.trained'>[]) => {
      await env.bus().publish(events);
      await until('acknowledgements ingested', async () => {
        const rows: { batch_id: string; trained_version: number | null; checkpointed: boolean }[] = await env
          .ds()
          .query(
            `SELECT "batch_id", "trained_version", "checkpointed" FROM "data_pool_batch_stats" WHERE "batch_id" = ANY($1::varchar[])`,
            [events.map((e) => e.payload.batchId)],
          );
        const of = new Map(rows.map((r) => [r.batch_id, r]));
        return events.every(
          (e) =>
            of.get(e.payload.batchId)?.trained_version === e.payload.policyVersion &&
            of.get(e.payload.batchId)?.checkpointed === e.payload.checkpointed,
        );
      });
    };
    // publish every batch (versions 1..6, each a weights.published with its checkpoint) but a full checkpoint (resume point) only after batch 2
    const published = [1, 2, 3, 4, 5, 6].map((v) => weightsPublished(v));
    await env.bus().publish(published);
    await acked(batches.map((b, i) => trained(b, i + 1, b.step === 2)));
    await until('weights ingested', async () => {
      const rows: unknown[] = await env
        .ds()
        .query(`SELECT 1 FROM "checkpoints" WHERE "id" = ANY($1::varchar[])`, [published.map((e) => e.payload.checkpointId)]);
      return rows.length === published.length;
    });
    const kept = async () => {
      // the trainer's batch log (BatchSource.since): batch stats not pruned, joined with their stored blob
      const log: { step: number }[] = await env
        .ds()
        .query(
          `SELECT s."step" FROM "data_pool_batch_stats" s JOIN "train_batch_blobs" b ON b."batch_id" = s."batch_id" WHERE s."run_id" = $1 AND s."pruned_at" IS NULL ORDER BY s."step"`,
          [runId],
        );
      const calls: { rollout_id: string }[] = await env
        .ds()
        .query(`SELECT DISTINCT "rollout_id" FROM "llm_calls" WHERE "rollout_id" = ANY($1::varchar[])`, [batches.map((b) => b.rollout_id)]);
      const withCalls = new Set(calls.map((c) => c.rollout_id));
      return { log: log.map((r) => r.step), calls: batches.filter((b) => withCalls.has(b.rollout_id)).map((b) => b.step) };
    };
    // resume point after batch 2 (the trainer restarts at position 3): batches 0..2 go, 3..5 stay although versions 4..6 cover them
    expect(await rt.pool.prune()).toMatchObject({ batches: 3 });
    expect(await kept()).toEqual({ log: [3, 4, 5], calls: [3, 4, 5] });
    expect(await rt.pool.prune()).toEqual({ batches: 0, calls: 0 });
    // the trainer resumed at 3 and trained 3 and 4 again, a full checkpoint after 4 (position 5): 3 and 4 go, 5 stays
    await acked([trained(batches[3], 7, false), trained(batches[4], 8, true)]);
    expect(await rt.pool.prune()).toMatchObject({ batches: 2 });
    expect(await kept()).toEqual({ log: [5], calls: [5] });
    await rt.stop();
  });

  it('the cut records its batch (the batch log row, its trajectories scheduled) in its own transaction; a train_batch.created read back from the bus writes nothing', async () => {
    const g = uid('g');
    const group = uid('dp');
    const rt = runtime(env, { batchTrajectories: 1, window: { inFlight: 1, window: 1 }, filters: { dropZeroVariance: false } }, group);
    const seen = await collect(env.bus(), TOPICS.trainBatches, uid('obs'));
    await rt.start();
    const r = rollout({ rolloutId: `${g}-r`, groupId: g, groupSize: 1, reward: 1 });
    const trajectoryId = r.started.payload.rolloutId;
    await env.bus().publish([r.started, ...r.calls, r.completed]);
    const event = (await until('train_batch.created', () =>
      seen.seen.find((x) => x.type === 'train_batch.created' && x.payload.runId === rt.config.runId),
    )) as EventEnvelope<'train_batch.created'>;
    await seen.stop();
    const p = event.payload;
    const [logged]: {
      event_id: string;
      step: number;
      trajectory_ids: string[];
      sample_ids: string[];
      num_samples: number;
      num_tokens: string;
    }[] = await env
      .ds()
      .query(
        `SELECT "event_id", "step", "trajectory_ids", "sample_ids", "num_samples", "num_tokens" FROM "train_batches" WHERE "id" = $1`,
        [p.batchId],
      );
    expect({ ...logged, num_tokens: Number(logged.num_tokens) }).toEqual({
      event_id: event.id,
      step: 0,
      trajectory_ids: [trajectoryId],
      sample_ids: p.samples.map((s) => s.sampleId),
      num_samples: 2,
      num_tokens: p.stats.totalTokens,
    });
    const trajectory = async () =>
      ((await env.ds().query(`SELECT "status", "train_batch_id" FROM "trajectories" WHERE "id" = $1`, [trajectoryId])) as unknown[])[0];
    expect(await trajectory()).toEqual({ status: 'scheduled', train_batch_id: p.batchId });
    // a batch this pool did not cut, naming the same trajectory, reaches its consumer group: marked processed, nothing written
    const foreign = createEvent(
      'train_batch.created',
      { ...p, batchId: `${p.batchId}-elsewhere`, step: p.step + 1 },
      { key: rt.config.runId, producer: 'elsewhere' },
    );
    await env.bus().publish([foreign]);
    await until(
      'the foreign batch consumed',
      async () =>
        (
          (await env
            .ds()
            .query(`SELECT 1 FROM "processed_events" WHERE "consumer" = $1 AND "event_id" = $2`, [group, foreign.id])) as unknown[]
        ).length > 0,
    );
    expect(await env.ds().query(`SELECT 1 FROM "train_batches" WHERE "id" = $1`, [foreign.payload.batchId])).toHaveLength(0);
    expect(await trajectory()).toEqual({ status: 'scheduled', train_batch_id: p.batchId });
    await rt.stop();
  });
}
