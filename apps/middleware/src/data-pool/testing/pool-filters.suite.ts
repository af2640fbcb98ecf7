import { afterEach, expect, it } from 'vitest';
import { TOPICS, type EventEnvelope } from '@anvil/contracts';
import { rollout, uid } from './pool-events';
import { collect, runtime, stopLeftovers, until, type PoolEnv } from './pool-kit';

type Settled = EventEnvelope<'rollout_group.settled'>;
type Ready = EventEnvelope<'trajectory.ready'>;

/** GRPO advantage (r - mean) / (population std + 1e-6) over the rewards of the group's trainable rollouts. */
function grpo(rewards: number[], r: number): number {
  const mean = rewards.reduce((a, x) => a + x, 0) / rewards.length;
  const std = Math.sqrt(rewards.reduce((a, x) => a + (x - mean) ** 2, 0) / rewards.length);
  return (r - mean) / (std + 1e-6);
}

/** The Data Pool's use of libs/rl's filters that only shows across events: retries of environment failures and over-long outputs. */
export function describePoolFilters(env: PoolEnv): void {
  afterEach(stopLeftovers);

  it('environment failures: dropped and sent back for retry while attempt <= maxEnvRetries (off by one: with 1, attempt 1 is retried, attempt 2 is not); a retry reopens its group, settles in a second wave against the whole group, and is trained', async () => {
    const rt = runtime(env, { batchTrajectories: 5, window: { inFlight: 12, window: 12 }, filters: { maxEnvRetries: 1 } });
    const out = await collect(env.bus(), TOPICS.trajectories, uid('obs'));
    await rt.start();
    const [a, b] = [uid('ga'), uid('gb')];
    const first = (g: string) => [
      rollout({ rolloutId: `${g}-r0`, groupId: g, groupSize: 3, reward: 1, sampleIndex: 0 }),
      rollout({ rolloutId: `${g}-r1`, groupId: g, groupSize: 3, reward: 0, sampleIndex: 1 }),
      rollout({ rolloutId: `${g}-r2`, groupId: g, groupSize: 3, reward: null, sampleIndex: 2, finishReason: 'env_error' }),
    ];
    await env.bus().publish([...first(a), ...first(b)].flatMap((r) => [r.started, ...r.calls, r.completed]));
    const settledOf = (g: string) => out.seen.filter((e) => e.type === 'rollout_group.settled' && e.payload.groupId === g) as Settled[];
    const readyOf = (id: string) => out.seen.find((e) => e.type === 'trajectory.ready' && e.payload.rolloutId === id) as Ready | undefined;
    await until('both groups settled once', () => settledOf(a).length === 1 && settledOf(b).length === 1);
    for (const g of [a, b]) {
      expect(settledOf(g)[0].payload).toMatchObject({ status: 'ready', reason: null, retryRolloutIds: [`${g}-r2`] });
      expect(settledOf(g)[0].payload.trajectoryIds.sort()).toEqual([`${g}-r0`, `${g}-r1`]);
    }
    // the first wave's statistics: rewards [1, 0] -> advantages +-1
    expect(readyOf(`${b}-r0`)?.payload.advantage).toBeCloseTo(grpo([1, 0], 1), 5);
    expect(readyOf(`${b}-r1`)?.payload.advantage).toBeCloseTo(grpo([1, 0], 0), 5);
    // nothing trains yet: 4 trajectories ready, the batch wants 5
    await new Promise((r) => setTimeout(r, 500));
    expect(
      Number((await env.ds().query(`SELECT count(*) AS n FROM "train_batches" WHERE "id" LIKE $1`, [`${rt.config.runId}:%`]))[0].n),
    ).toBe(0);

    // the rollout manager's retries: new rollouts of the same group and sample index (attempt 2)
    const retries = [
      rollout({ rolloutId: `${a}-r2.retry1`, groupId: a, groupSize: 3, reward: null, sampleIndex: 2, finishReason: 'env_error' }),
      rollout({ rolloutId: `${b}-r2.retry1`, groupId: b, groupSize: 3, reward: 1, sampleIndex: 2 }),
    ];
    await env.bus().publish(retries.flatMap((r) => [r.started, ...r.calls, r.completed]));
    await until('both groups settled a second time', () => settledOf(a).length === 2 && settledOf(b).length === 2);
    // a: the retry failed again on attempt 2 > maxEnvRetries 1: dropped, not retried; the group stays 'ready' (its first wave trains)
    expect(settledOf(a)[1].id).not.toBe(settledOf(a)[0].id);
    expect(settledOf(a)[1].payload).toMatchObject({ status: 'ready', trajectoryIds: [], retryRolloutIds: [] });
    // b: the retry completed; its advantage is over the whole group [1, 0, 1], the first wave's advantages stay as published
    expect(settledOf(b)[1].payload).toMatchObject({ status: 'ready', trajectoryIds: [`${b}-r2.retry1`], retryRolloutIds: [] });
    expect(readyOf(`${b}-r2.retry1`)?.payload.advantage).toBeCloseTo(grpo([1, 0, 1], 1), 5);
    const reasons: { rollout_id: string; status: string; reason: string | null }[] = await env
      .ds()
      .query(`SELECT "rollout_id", "status", "reason" FROM "data_pool_queue" WHERE "group_id" = ANY($1::varchar[]) ORDER BY "rollout_id"`, [
        [a, b],
      ]);
    const reasonOf = Object.fromEntries(reasons.map((r) => [r.rollout_id, `${r.status} ${r.reason ?? ''}`.trim()]));
    expect(reasonOf[`${a}-r2`]).toBe('dropped env_failure_retried: env_error on attempt 1 of at most 2');
    expect(reasonOf[`${a}-r2.retry1`]).toBe('dropped env_failure_exhausted: env_error on attempt 2 (maxEnvRetries 1)');
    expect(reasonOf[`${b}-r2`]).toBe('dropped env_failure_retried: env_error on attempt 1 of at most 2');
    // the retried rows left the Windowed FIFO: the five trainable trajectories make one batch
    const [batch] = await until('a batch', async () => {
      const rows: { trajectory_ids: string[] }[] = await env
        .ds()
        .query(`SELECT "trajectory_ids" FROM "train_batches" WHERE "id" LIKE $1`, [`${rt.config.runId}:%`]);
      return rows.length ? rows : null;
    });
    expect([...batch.trajectory_ids].sort()).toEqual([`${a}-r0`, `${a}-r1`, `${b}-r0`, `${b}-r1`, `${b}-r2.retry1`].sort());
    await out.stop();
    await rt.stop();
  });

  it('over-long outputs, per run: a rollout with a call stopped at max tokens is masked (weight 0, out of the statistics) with maskTruncated, trained as it is without', async () => {
    for (const maskTruncated of [true, false]) {
      const g = uid('g');
      const rt = runtime(env, { batchTrajectories: 3, window: { inFlight: 3, window: 3 }, filters: { maskTruncated } });
      const out = await collect(env.bus(), TOPICS.trajectories, uid('obs'));
      await rt.start();
      const rs = [
        rollout({ rolloutId: `${g}-r0`, groupId: g, groupSize: 3, reward: 1, sampleIndex: 0, truncated: [1] }),
        rollout({ rolloutId: `${g}-r1`, groupId: g, groupSize: 3, reward: 0, sampleIndex: 1 }),
        rollout({ rolloutId: `${g}-r2`, groupId: g, groupSize: 3, reward: 1, sampleIndex: 2 }),
      ];
      await env.bus().publish(rs.flatMap((r) => [r.started, ...r.calls, r.completed]));
      const ready = await until('3 trajectories', () => {
        const mine = out.seen.filter((e) => e.type === 'trajectory.ready' && e.payload.groupId === g) as Ready[];
        return mine.length === 3 && new Map(mine.map((e) => [e.payload.rolloutId, e.payload]));
      });
      if (maskTruncated) {
        expect(ready.get(`${g}-r0`)).toMatchObject({ lossMasked: true, advantage: 0 });
        // statistics over r1 and r2 only: [0, 1]
        expect(ready.get(`${g}-r1`)?.advantage).toBeCloseTo(grpo([0, 1], 0), 5);
        expect(ready.get(`${g}-r2`)?.advantage).toBeCloseTo(grpo([0, 1], 1), 5);
      } else {
        expect(ready.get(`${g}-r0`)?.lossMasked).toBe(false);
        for (const [i, r] of [1, 0, 1].entries()) expect(ready.get(`${g}-r${i}`)?.advantage).toBeCloseTo(grpo([1, 0, 1], r), 5);
      }
      const [st] = await until('the batch', async () => {
        const rows: { stats: { lossMasked: number; samples: number } }[] = await env
          .ds()
          .query(`SELECT "stats" FROM "data_pool_batch_stats" WHERE "run_id" = $1`, [rt.config.runId]);
        return rows.length ? rows : null;
      });
      expect(st.stats).toMatchObject({ lossMasked: maskTruncated ? 1 : 0, samples: 6 });
      await out.stop();
      await rt.stop();
    }
  });
}
