import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEvent } from '@anvil/contracts';
import { GatewaySession } from '@anvil/persistence';
import { RolloutRuntime, type RolloutOutcome } from '@anvil/rollout-manager';
import { ADMIN_TOKEN, oraclePolicy, renderPrompt, startRolloutStack, until, type RolloutStack } from './fixtures/rollout-stack';

/**
 * White-box loops through the real gateway (real PostgreSQL + Kafka, scripted policy that solves
 * chain-add): with each context manager the prompt ids the policy received are exactly the
 * rendering of what the manager produced, an append-only history is recorded as extensions and
 * a window rewrite (or a summary) as a branch; rewards and per-call process rewards from the
 * chain-add verifier; evaluation runs pinned to a version with training admissions gated.
 */
let stack: RolloutStack;
let runtime: RolloutRuntime;
const outcomes: RolloutOutcome[] = [];

beforeAll(async () => {
  stack = await startRolloutStack('whitebox', oraclePolicy());
  runtime = new RolloutRuntime({
    gatewayUrl: stack.gatewayUrl,
    adminToken: ADMIN_TOKEN,
    bus: stack.bus,
    dataSource: stack.ds,
    config: { concurrency: 8, eta: 4, groupsPerStep: 8, admissionPollMs: 100, consumerGroup: `it.rm.whitebox.${Date.now()}` },
  });
  runtime.onRolloutCompleted((o) => outcomes.push(o));
  await runtime.start();
});

afterAll(async () => {
  await runtime?.stop();
  await stack?.close();
});

const k4 = { k: 4, maxOperand: 99 };

async function runOne(taskSetId: string, context: Record<string, unknown>): Promise<RolloutOutcome> {
  await runtime.loadBuiltin({
    id: taskSetId,
    env: 'chain-add',
    envConfig: k4,
    context: context as never,
    seed: 5,
    trainCount: 1,
    evalCount: 0,
    sampling: { temperature: 1, maxTokens: 96 },
  });
  const { rolloutIds } = await runtime.submit({ taskSetId, groupSize: 1 });
  return until(`${taskSetId} outcome`, () => outcomes.find((o) => o.rolloutId === rolloutIds[0]), 60_000);
}

async function proxyRequestsOf(rolloutId: string) {
  const session = await stack.ds.manager.findOneByOrFail(GatewaySession, { rolloutId });
  expect(session.status).toBe('closed');
  return stack.proxy.requests.filter((r) => r.sessionId === session.id);
}

describe('white-box loop with context managers', () => {
  it('append-only: full reward, every later call extends the previous one, prompt ids = the manager view rendered', async () => {
    const o = await runOne('wb-append', { kind: 'append_only' });
    expect(o).toMatchObject({ finishReason: 'completed', outcomeReward: 1, success: true, numCalls: 4 });
    const sent = o.loop!.sent;
    expect(sent.map((s) => s.purpose)).toEqual(['step', 'step', 'step', 'step']);
    const reqs = await proxyRequestsOf(o.rolloutId);
    expect(reqs).toHaveLength(4);
    sent.forEach((s, i) => expect(reqs[i].promptIds).toEqual(renderPrompt(s.messages, s.tools)));
    expect(sent.map((s) => s.capture?.split(':')[0])).toEqual(['branch', 'extend', 'extend', 'extend']);
    expect(sent.map((s) => s.rewritten)).toEqual([false, false, false, false]);
    // Process rewards: one per assistant turn, attached to its call id, all correct.
    const completed = await until('rollout.completed', () =>
      stack.of('rollout.completed').find((e) => (e.payload as { rolloutId: string }).rolloutId === o.rolloutId),
    );
    const p = completed.payload as { processRewards: { callId: string; value: number }[]; outcomeReward: number; versionsSpanned: number };
    expect(p.processRewards).toEqual(o.loop!.stepCallIds.map((callId) => ({ callId, value: 1 })));
    expect(p.outcomeReward).toBe(1);
    // The calls' records (their event id is the call id) reached Kafka.
    await until(
      'the 4 llm_call.recorded',
      () => o.loop!.callIds.every((id) => stack.of('llm_call.recorded').some((e) => e.id === id)) || undefined,
    );
  });

  it('sliding window: the rewrite is a branch, and still exactly what the manager produced', async () => {
    const o = await runOne('wb-window', { kind: 'sliding_window', lastTurns: 1 });
    expect(o).toMatchObject({ finishReason: 'completed', outcomeReward: 1 });
    const sent = o.loop!.sent;
    const reqs = await proxyRequestsOf(o.rolloutId);
    expect(reqs).toHaveLength(sent.length);
    sent.forEach((s, i) => expect(reqs[i].promptIds).toEqual(renderPrompt(s.messages, s.tools)));
    // Calls 3 and 4 see only the last turn: history rewritten, so a new branch each time.
    expect(sent.map((s) => s.rewritten)).toEqual([false, false, true, true]);
    expect(sent.map((s) => s.capture?.split(':')[0])).toEqual(['branch', 'extend', 'branch', 'branch']);
    expect(sent[2].messages.filter((m) => m.role === 'assistant')).toHaveLength(1);
  });

  it('summarisation: the summariser calls the policy through the same session; the summarised view is a branch', async () => {
    const o = await runOne('wb-summary', { kind: 'summarize', maxTurns: 2, keepLastTurns: 1 });
    expect(o).toMatchObject({ finishReason: 'completed', outcomeReward: 1 });
    const sent = o.loop!.sent;
    expect(sent.map((s) => s.purpose)).toContain('summary');
    const reqs = await proxyRequestsOf(o.rolloutId);
    expect(reqs).toHaveLength(sent.length);
    sent.forEach((s, i) => expect(reqs[i].promptIds).toEqual(renderPrompt(s.messages, s.tools)));
    const firstSummary = sent.findIndex((s) => s.purpose === 'summary');
    const after = sent[firstSummary + 1];
    expect(after.rewritten).toBe(true);
    expect(after.capture?.startsWith('branch:')).toBe(true);
    expect(after.messages.some((m) => m.content?.startsWith('Summary of earlier turns: numbers were added'))).toBe(true);
    expect(o.numCalls).toBe(sent.length);
  });
});

describe('evaluation rollouts', () => {
  it('runs the eval split pinned to the current version, publishes evaluation.completed, gates training admissions meanwhile, never marks them for training', async () => {
    await runtime.loadBuiltin({
      id: 'wb-eval',
      env: 'chain-add',
      envConfig: { k: 2, maxOperand: 20, toolDelay: { kind: 'fixed', ms: 150 } },
      seed: 9,
      trainCount: 2,
      evalCount: 3,
    });
    await expect(
      runtime.runEvaluation({ taskSetId: 'wb-eval', version: runtime.policyVersion + 1, waitForVersionMs: 200 }),
    ).rejects.toThrow(/version: 1 was not activated/);
    const evalDone = runtime.runEvaluation({ taskSetId: 'wb-eval', version: runtime.policyVersion, evalId: 'eval-1' });
    await until('eval admitted', () => runtime.snapshot().evaluationsRunning === 1 && runtime.snapshot().running > 0);
    const { rolloutIds: trainIds } = await runtime.submit({ taskSetId: 'wb-eval', groupSize: 1 });
    const result = await evalDone;
    expect(result).toMatchObject({
      evalId: 'eval-1',
      taskSetId: 'wb-eval',
      policyVersion: 0,
      successRate: 1,
      meanReward: 1,
      versionDrift: 0,
    });
    expect(result.results).toHaveLength(3);
    const ev = await until('evaluation.completed in Kafka', () =>
      stack.of('evaluation.completed').find((e) => (e.payload as { evalId: string }).evalId === 'eval-1'),
    );
    expect(ev.payload).toMatchObject({ policyVersion: 0, successRate: 1 });
    const started = stack
      .of('rollout.started')
      .map((e) => e.payload as { rolloutId: string; groupId: string; purpose?: string; evalId?: string });
    const evalStarts = started.filter((s) => s.evalId === 'eval-1');
    expect(evalStarts).toHaveLength(3);
    expect(evalStarts.every((s) => s.purpose === 'eval' && s.groupId.startsWith('eval:'))).toBe(true);
    // Training rollouts submitted during the evaluation started only after it finished.
    const trainStarts = await until('train rollouts started', () => {
      const s = stack.of('rollout.started').filter((e) => trainIds.includes((e.payload as { rolloutId: string }).rolloutId));
      return s.length === trainIds.length ? s : undefined;
    });
    // Each eval rollout ended (the last one just before evaluation.completed) before any of them started.
    const lastEvalEnd = Math.max(
      ...stack
        .of('rollout.completed')
        .filter((e) => (e.payload as { groupId: string }).groupId.startsWith('eval:'))
        .map((e) => e.occurredAt),
    );
    for (const t of trainStarts) expect(t.occurredAt).toBeGreaterThanOrEqual(lastEvalEnd);
    expect(trainStarts.every((t) => (t.payload as { purpose?: string }).purpose === 'train')).toBe(true);
  });

  it('draws the same sampler seeds per (task, sample) in every evaluation, at the temperature asked for; train rollouts of one task get seeds of their own', async () => {
    await runtime.loadBuiltin({
      id: 'wb-eval-seeds',
      env: 'chain-add',
      envConfig: { k: 2, maxOperand: 20 },
      seed: 11,
      trainCount: 1,
      evalCount: 3,
      sampling: { temperature: 1, maxTokens: 96 },
    });
    const first = await runtime.runEvaluation({
      taskSetId: 'wb-eval-seeds',
      version: runtime.policyVersion,
      samplesPerTask: 2,
      evalId: 'seeds-1',
    });
    const second = await runtime.runEvaluation({
      taskSetId: 'wb-eval-seeds',
      version: runtime.policyVersion,
      samplesPerTask: 2,
      temperature: 0.5,
      evalId: 'seeds-2',
    });
    // (task, sample index) -> the seed and temperature of the rollout's first call at the proxy
    const firstCalls = async (r: { results: { taskId: string; rolloutId: string }[] }) => {
      const out = new Map<string, { seed: number | null; temperature: number }>();
      for (const x of r.results) {
        const reqs = await proxyRequestsOf(x.rolloutId);
        out.set(`${x.taskId}#${x.rolloutId.split('.').pop()}`, { seed: reqs[0].seed, temperature: reqs[0].temperature });
      }
      return out;
    };
    const a = await firstCalls(first);
    const b = await firstCalls(second);
    expect(a.size).toBe(6);
    expect([...b.keys()].sort()).toEqual([...a.keys()].sort());
    for (const [key, call] of a) {
      expect(call.temperature, key).toBe(1);
      expect(b.get(key)?.temperature, key).toBe(0.5);
      expect(call.seed, key).not.toBeNull();
      expect(b.get(key)?.seed, key).toBe(call.seed);
    }
    // the two samples of a task draw different numbers
    expect(new Set([...a.values()].map((c) => c.seed)).size).toBe(6);
    // train rollouts of the same task do not reuse one another's (or the evaluation's) seeds
    const { rolloutIds } = await runtime.submit({ taskSetId: 'wb-eval-seeds', groupSize: 3 });
    await until(
      'train rollouts done',
      () => (rolloutIds.every((id) => outcomes.some((o) => o.rolloutId === id)) ? true : undefined),
      60_000,
    );
    const trainSeeds = await Promise.all(rolloutIds.map(async (id) => (await proxyRequestsOf(id))[0].seed));
    expect(new Set(trainSeeds).size).toBe(3);
    for (const seed of trainSeeds) expect([...a.values()].map((c) => c.seed)).not.toContain(seed);
  });
});

describe('train passes', () => {
  it('a shuffleSeed queues the train split in a seeded permutation, a new one each repeat; without one, in task id order', async () => {
    await runtime.loadBuiltin({ id: 'order', env: 'chain-add', envConfig: { k: 2 }, seed: 4, trainCount: 6, evalCount: 0 });
    const rolloutIds: string[] = [];
    const taskOrder = async ({ groupIds, rolloutIds: ids }: { groupIds: string[]; rolloutIds: string[] }) => {
      rolloutIds.push(...ids);
      // the rollout-manager's own group rows (rollout_groups is the Data Pool's, written once rollouts start)
      const rows = (await stack.ds.query('SELECT "id", "task_id" FROM "rm_groups" WHERE "id" = ANY($1)', [groupIds])) as {
        id: string;
        task_id: string;
      }[];
      const taskOf = new Map(rows.map((r) => [r.id, r.task_id]));
      return groupIds.map((g) => taskOf.get(g) as string);
    };
    const stored = await taskOrder(await runtime.submit({ taskSetId: 'order', groupSize: 1 }));
    expect(stored).toEqual([...stored].sort());
    const shuffled = await taskOrder(await runtime.submit({ taskSetId: 'order', groupSize: 1, shuffleSeed: 11, repeat: 2 }));
    const [first, second] = [shuffled.slice(0, 6), shuffled.slice(6)];
    expect([...first].sort()).toEqual(stored);
    expect([...second].sort()).toEqual(stored);
    expect(first).not.toEqual(stored);
    expect(second).not.toEqual(first);
    const again = await taskOrder(await runtime.submit({ taskSetId: 'order', groupSize: 1, shuffleSeed: 11 }));
    expect(again).toEqual(first);
    await until(
      'the order rollouts done',
      () => (rolloutIds.every((id) => outcomes.some((o) => o.rolloutId === id)) ? true : undefined),
      120_000,
    );
  });
});

describe('partial rollouts: what a weight update does is chosen per task set', () => {
  it("a task set's weightSwap is its sessions' and reaches every generate request; without one the inference-proxy's policy decides", async () => {
    for (const choice of ['abort-and-resume', 'finish', undefined] as const) {
      const id = `ws-${choice ?? 'proxy'}`;
      await runtime.loadBuiltin({
        id,
        env: 'chain-add',
        envConfig: { k: 3 },
        seed: 9,
        trainCount: 1,
        evalCount: 0,
        ...(choice ? { weightSwap: choice } : {}),
      });
      const { rolloutIds } = await runtime.submit({ taskSetId: id, groupSize: 1 });
      const o = await until(`${id} outcome`, () => outcomes.find((x) => x.rolloutId === rolloutIds[0]), 60_000);
      expect(o).toMatchObject({ finishReason: 'completed', outcomeReward: 1, numCalls: 3 });
      const session = await stack.ds.manager.findOneByOrFail(GatewaySession, { rolloutId: o.rolloutId });
      expect(session.weightSwap).toBe(choice ?? null);
      const reqs = await proxyRequestsOf(o.rolloutId);
      expect(reqs).toHaveLength(3);
      for (const r of reqs) expect(r.weightSwap).toBe(choice);
    }
  });
});

describe('staleness admission', () => {
  it('η = 1: a group is admitted at current − oldest = 1 and refused at 2 until the oldest finishes (fails if the bound is off by one)', async () => {
    const eta1 = new RolloutRuntime({
      gatewayUrl: stack.gatewayUrl,
      adminToken: ADMIN_TOKEN,
      bus: stack.bus,
      dataSource: stack.ds,
      config: {
        concurrency: 8,
        eta: 1,
        groupsPerStep: 100,
        admissionPollMs: 50,
        consumerGroup: `it.rm.eta1.${Date.now()}`,
        initialPolicyVersion: 0,
      },
    });
    const mine: RolloutOutcome[] = [];
    eta1.onRolloutCompleted((o) => mine.push(o));
    await eta1.start();
    try {
      // The agents of A and B run until the test creates their file; C's answers at once.
      for (const name of ['A', 'B', 'C'] as const) {
        await eta1.loadTaskSet(
          {
            id: `eta-${name}`,
            agent: {
              kind: 'black-box',
              name: 'echo',
              command: [
                'sh',
                '-c',
                name === 'C' ? 'echo 1' : `while [ ! -f /tmp/rm-eta-${process.pid}-${name} ]; do sleep 0.05; done; echo 1`,
              ],
              // The test lets it go through a file in the host's /tmp, which a sandbox does not show.
              sandbox: 'none',
            },
            verifier: { kind: 'function', name: 'final-answer' },
          },
          [
            {
              id: 't',
              env: null,
              messages: [{ role: 'user', content: name }],
              tools: [],
              split: 'train',
              difficulty: 0,
              data: { answer: 1 },
            },
          ],
        );
      }
      const { writeFileSync, rmSync } = await import('node:fs');
      const file = (n: string) => `/tmp/rm-eta-${process.pid}-${n}`;
      const startedIds = () => stack.of('rollout.started').map((e) => (e.payload as { rolloutId: string }).rolloutId);
      const a = await eta1.submit({ taskSetId: 'eta-A', groupSize: 1 });
      await until('A started', () => startedIds().includes(a.rolloutIds[0]) || undefined);
      await stack.bus.publish(
        createEvent(
          'policy_version.activated',
          { version: 1, deployment: 'it', swapPolicy: 'drain-then-swap', activatedAt: Date.now() },
          { key: 'it', producer: 'test' },
        ),
      );
      await until('version 1 seen', () => eta1.policyVersion === 1 || undefined);
      const b = await eta1.submit({ taskSetId: 'eta-B', groupSize: 1 });
      await until('B admitted at 1 − 0 = η', () => startedIds().includes(b.rolloutIds[0]) || undefined, 10_000);
      await stack.bus.publish(
        createEvent(
          'policy_version.activated',
          { version: 2, deployment: 'it', swapPolicy: 'drain-then-swap', activatedAt: Date.now() },
          { key: 'it', producer: 'test' },
        ),
      );
      await until('version 2 seen', () => eta1.policyVersion === 2 || undefined);
      const c = await eta1.submit({ taskSetId: 'eta-C', groupSize: 1 });
      await new Promise((r) => setTimeout(r, 1500));
      expect(startedIds()).not.toContain(c.rolloutIds[0]);
      expect(eta1.snapshot().queuedGroups).toBe(1);
      // The wait is timed by what held it: the version bound, not capacity or slots.
      expect(eta1.snapshot().admissionBlockedSeconds.version).toBeGreaterThan(1.2);
      expect(eta1.snapshot().admissionBlockedSeconds).toMatchObject({ capacity: 0, slots: 0 });
      writeFileSync(file('A'), '');
      await until('C admitted once A finished (2 − 1 = η)', () => startedIds().includes(c.rolloutIds[0]) || undefined, 15_000);
      // ... and stops once C is admitted
      const blockedAtAdmission = eta1.snapshot().admissionBlockedSeconds.version;
      await new Promise((r) => setTimeout(r, 300));
      expect(eta1.snapshot().admissionBlockedSeconds.version).toBe(blockedAtAdmission);
      // Its capacity is released once rollout.completed is durable; listeners hear of it after its session is closed.
      const aOut = await until('A outcome', () => mine.find((o) => o.rolloutId === a.rolloutIds[0]));
      expect(aOut.versionsSpanned).toBe(3);
      writeFileSync(file('B'), '');
      await until('all done', () => mine.length >= 3 || undefined, 15_000);
      for (const n of ['A', 'B']) rmSync(file(n), { force: true });
      const aCompleted = stack.of('rollout.completed').find((e) => (e.payload as { rolloutId: string }).rolloutId === a.rolloutIds[0])!;
      expect(aCompleted.payload).toMatchObject({ versionsSpanned: 3, policyVersionAtEnd: 2 });
    } finally {
      await eta1.stop();
    }
  });
});

describe('capacity release', () => {
  it('(η + 1)·B caps in-flight + untrained groups; train_batch.trained releases one, rollout_group.settled dropped with retries re-runs them in the same group', async () => {
    const rt = new RolloutRuntime({
      gatewayUrl: stack.gatewayUrl,
      adminToken: ADMIN_TOKEN,
      bus: stack.bus,
      dataSource: stack.ds,
      config: { concurrency: 8, eta: 0, groupsPerStep: 1, admissionPollMs: 50, consumerGroup: `it.rm.capacity.${Date.now()}` },
    });
    const mine: RolloutOutcome[] = [];
    rt.onRolloutCompleted((o) => mine.push(o));
    await rt.start();
    try {
      await rt.loadTaskSet(
        {
          id: 'cap',
          agent: { kind: 'black-box', name: 'echo', command: ['sh', '-c', 'echo 1'] },
          verifier: { kind: 'function', name: 'final-answer' },
        },
        [{ id: 't', env: null, messages: [{ role: 'user', content: 'x' }], tools: [], split: 'train', difficulty: 0, data: { answer: 1 } }],
      );
      const g1 = await rt.submit({ taskSetId: 'cap', groupSize: 1 });
      const g2 = await rt.submit({ taskSetId: 'cap', groupSize: 1 });
      await until('g1 done', () => mine.some((o) => o.rolloutId === g1.rolloutIds[0]) || undefined).catch((err: Error) => {
        throw new Error(`${err.message}: ${JSON.stringify(rt.snapshot())}`);
      });
      await new Promise((r) => setTimeout(r, 800));
      // g1 finished but is untrained: capacity 1 is still held.
      expect(mine.some((o) => o.rolloutId === g2.rolloutIds[0])).toBe(false);
      expect(rt.snapshot().staleness).toMatchObject({ inFlight: [], untrained: [g1.groupIds[0]], capacity: 1 });
      expect(rt.snapshot().admissionBlockedSeconds.capacity).toBeGreaterThan(0.5);
      expect(rt.snapshot().admissionBlockedSeconds).toMatchObject({ version: 0, slots: 0 });
      await stack.bus.publish(
        createEvent(
          'train_batch.trained',
          {
            batchId: 'b1',
            batchStep: 0,
            runId: null,
            trainerStep: 1,
            policyVersion: 0,
            groupIds: g1.groupIds,
            trajectoryIds: [],
            outcome: 'trained',
            reason: null,
            checkpointed: false,
            trainedAt: Date.now(),
          },
          { key: 'b1', producer: 'test' },
        ),
      );
      await until('g2 admitted and done after the release', () => mine.some((o) => o.rolloutId === g2.rolloutIds[0]) || undefined, 15_000);
      await stack.bus.publish(
        createEvent(
          'rollout_group.settled',
          {
            groupId: g2.groupIds[0],
            taskId: 'cap/t',
            status: 'dropped',
            reason: 'all_env_error',
            trajectoryIds: [],
            retryRolloutIds: g2.rolloutIds,
          },
          { key: g2.groupIds[0], producer: 'test' },
        ),
      );
      const retryId = `${g2.rolloutIds[0]}.retry1`;
      const retry = await until('the retry', () => mine.find((o) => o.rolloutId === retryId), 15_000);
      expect(retry).toMatchObject({ groupId: g2.groupIds[0], finishReason: 'completed', outcomeReward: 1 });
      const started = stack.of('rollout.started').find((e) => (e.payload as { rolloutId: string }).rolloutId === retryId)!;
      expect(started.payload).toMatchObject({ groupId: g2.groupIds[0], sampleIndex: 0 });
      expect((started.payload as { queuePosition: number }).queuePosition).toBeGreaterThan(
        (
          stack.of('rollout.started').find((e) => (e.payload as { rolloutId: string }).rolloutId === g2.rolloutIds[0])!.payload as {
            queuePosition: number;
          }
        ).queuePosition,
      );
    } finally {
      await rt.stop();
    }
  });
});

describe('long-horizon environment', () => {
  it('many turns with environment memory and a delegated sub-agent: its calls are branches of the same session and share the outcome reward', async () => {
    await runtime.loadBuiltin({
      id: 'wb-long',
      env: 'long-horizon',
      envConfig: { facts: 6, questionKeys: 2 },
      context: { kind: 'sliding_window', lastTurns: 6 },
      builtinTools: ['delegate'],
      seed: 4,
      trainCount: 1,
      evalCount: 0,
      sampling: { temperature: 1, maxTokens: 96 },
    });
    const { rolloutIds } = await runtime.submit({ taskSetId: 'wb-long', groupSize: 1 });
    const o = await until('the long rollout', () => outcomes.find((x) => x.rolloutId === rolloutIds[0]), 120_000);
    expect(o, o.error ?? '').toMatchObject({ finishReason: 'completed', outcomeReward: 1, success: true });
    const loop = o.loop!;
    expect(loop.subAgentRuns).toBe(1);
    expect(loop.steps).toBe(15);
    const sub = loop.sent.filter((s) => s.purpose === 'subagent');
    expect(sub).toHaveLength(3);
    expect(sub[0].capture?.startsWith('branch:')).toBe(true);
    expect(sub[1].capture?.startsWith('extend:')).toBe(true);
    // Everything went through the one session: the policy saw exactly what the loop sent.
    const reqs = await proxyRequestsOf(o.rolloutId);
    expect(reqs).toHaveLength(loop.sent.length);
    loop.sent.forEach((s, i) => expect(reqs[i].promptIds).toEqual(renderPrompt(s.messages, s.tools)));
    const done = await until('rollout.completed', () =>
      stack.of('rollout.completed').find((e) => (e.payload as { rolloutId: string }).rolloutId === o.rolloutId),
    );
    expect(done.payload).toMatchObject({ numCalls: 18, outcomeReward: 1 });
    // The window rewrote the growing history: later steps are branches.
    expect(loop.sent.filter((s) => s.purpose === 'step' && s.rewritten).length).toBeGreaterThan(0);
  });
});
