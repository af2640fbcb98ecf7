import 'reflect-metadata';
import { join } from 'node:path';
import { Global, Module, type DynamicModule } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBus, type MessageBus } from '@anvil/messaging';
import { createLogger, ServiceMetrics } from '@anvil/observability';
import { createDataSource, GatewaySession } from '@anvil/persistence';
import { DATA_SOURCE, EVENT_BUS, OpsModule } from '@anvil/service-kit';
import { gatewayEnv, GatewayApiModule } from '@anvil/gateway';
import { RolloutRuntime, type RolloutOutcome } from '@anvil/rollout-manager';
import { ADMIN_TOKEN, oraclePolicy, startRolloutStack, until, type RolloutStack } from './fixtures/rollout-stack';

/**
 * Per-rollout call budgets and rate limits, end to end on the real PostgreSQL server and Kafka
 * broker: a black-box agent that loops calls as fast as it can (through two gateway instances
 * sharing the database) is held to its rate and its budget, the excess refused with 429 and
 * counted, nothing past the budget recorded, and its rollout ends as max_steps with the refusals
 * it recorded; a rollout beside it under the same limits is untouched; the white-box loop ends at
 * a spent budget and waits out a rate limit.
 */
const root = join(__dirname, '..', '..');
const FLOOD = ['node', 'test/integration/fixtures/flood-agent.mjs'];
let stack: RolloutStack;
let second: { url: string; close(): Promise<void> };
let runtime: RolloutRuntime;
const outcomes: RolloutOutcome[] = [];

beforeAll(async () => {
  stack = await startRolloutStack('calllimits', oraclePolicy());
  second = await startSecondGateway(stack);
  runtime = new RolloutRuntime({
    gatewayUrl: stack.gatewayUrl,
    adminToken: ADMIN_TOKEN,
    bus: stack.bus,
    dataSource: stack.ds,
    config: {
      concurrency: 4,
      eta: 4,
      groupsPerStep: 8,
      admissionPollMs: 100,
      consumerGroup: `it.rm.calllimits.${Date.now()}`,
      repoRoot: root,
    },
    verifiers: { anything: () => ({ outcomeReward: 1, success: true }) },
  });
  runtime.onRolloutCompleted((o) => outcomes.push(o));
  await runtime.start();
}, 120_000);

afterAll(async () => {
  await runtime?.stop();
  await second?.close();
  await stack?.close();
});

/** Another gateway instance on the same database and broker (what a load balancer would put beside the first). */
async function startSecondGateway(s: RolloutStack): Promise<{ url: string; close(): Promise<void> }> {
  const ds = createDataSource({ url: s.scratch.url });
  await ds.initialize();
  const bus: MessageBus = createBus({
    kind: 'kafka',
    brokers: s.brokers.split(','),
    clientId: 'calllimits-gw2',
    topicPrefix: s.topicPrefix,
  });
  const config = gatewayEnv.parse({
    KAFKA_BROKERS: s.brokers,
    DATABASE_URL: s.scratch.url,
    GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN,
    INFERENCE_PROXY_URL: s.proxy.url,
    LOG_LEVEL: 'error',
    MAX_STALENESS: '100',
    GATEWAY_OUTBOX_SWEEP_MS: '60000',
  });
  @Global()
  @Module({})
  class Infra {
    static forRoot(): DynamicModule {
      return {
        module: Infra,
        providers: [
          { provide: EVENT_BUS, useValue: bus },
          { provide: DATA_SOURCE, useValue: ds },
        ],
        exports: [EVENT_BUS, DATA_SOURCE],
      };
    }
  }
  @Module({})
  class Root {}
  const app = await NestFactory.create<NestFastifyApplication>(
    {
      module: Root,
      imports: [
        OpsModule.forRoot({
          service: 'gateway',
          logger: createLogger({ service: 'gateway', level: 'error' }),
          metrics: new ServiceMetrics('gateway'),
        }),
        Infra.forRoot(),
        GatewayApiModule.forRoot({ ...config, DB_MIGRATE_ON_START: false }),
      ],
    },
    new FastifyAdapter({ bodyLimit: config.MAX_REQUEST_BYTES }),
    { logger: false, abortOnError: false },
  );
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address();
  return {
    url: `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`,
    async close() {
      await app.close();
      await bus.close();
      await ds.destroy();
    },
  };
}

const outcomeOf = (rolloutId: string, timeoutMs = 60_000) =>
  until(`${rolloutId} outcome`, () => outcomes.find((o) => o.rolloutId === rolloutId), timeoutMs);

const completedOf = (rolloutId: string) =>
  until(`${rolloutId} rollout.completed`, () =>
    stack.of('rollout.completed').find((e) => (e.payload as { rolloutId: string }).rolloutId === rolloutId),
  );

/** What a gateway's /metrics says of refused calls, by reason. */
async function refusedOn(url: string): Promise<{ budget: number; rate: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const of = (reason: string) => {
    const line = text.split('\n').find((l) => l.startsWith('anvil_gateway_calls_refused_total{') && l.includes(`reason="${reason}"`));
    return line ? Number(line.split(' ').at(-1)) : 0;
  };
  return { budget: of('budget'), rate: of('rate') };
}

const oneTask = (id: string) => [
  { id, env: null, messages: [{ role: 'user' as const, content: id }], tools: [], split: 'train' as const, difficulty: 0, data: {} },
];

describe('call limits on black-box rollouts', () => {
  it('a flooding agent is held to its rate and its budget (across two gateway instances), the excess refused and counted, its rollout ended as max_steps; one beside it is untouched', async () => {
    const limits = { maxCalls: 30, callsPerSecond: 20, burst: 5, timeoutMs: 60_000 };
    await runtime.loadTaskSet(
      {
        id: 'flood',
        agent: {
          kind: 'black-box',
          name: 'flood',
          command: FLOOD,
          env: { FLOOD_OTHER_ORIGIN: second.url, FLOOD_CONCURRENCY: '8' },
          // It reaches a second gateway instance directly, which a sandbox forbids: this test is about the gateway's limits.
          sandbox: 'none',
        },
        verifier: { kind: 'function', name: 'anything' },
        limits,
      },
      oneTask('flood'),
    );
    await runtime.loadTaskSet(
      {
        id: 'polite',
        agent: {
          kind: 'black-box',
          name: 'polite',
          command: FLOOD,
          env: { FLOOD_MODE: 'polite' },
          readOnlyPaths: ['test/integration/fixtures'],
        },
        verifier: { kind: 'function', name: 'anything' },
        limits,
      },
      oneTask('polite'),
    );
    const before = [await refusedOn(stack.gatewayUrl), await refusedOn(second.url)];
    const f = (await runtime.submit({ taskSetId: 'flood', groupSize: 1 })).rolloutIds[0];
    const p = (await runtime.submit({ taskSetId: 'polite', groupSize: 1 })).rolloutIds[0];
    const [fo, po] = [await outcomeOf(f), await outcomeOf(p)];

    // Ended by its budget, promptly (its timeout is a minute away), with the refusals it recorded.
    expect(fo.finishReason, `${fo.error} ${fo.blackBox?.stderr}`).toBe('max_steps');
    expect(fo.agentMs).toBeLessThan(20_000);
    expect(fo.numCalls).toBe(30);
    const session = await stack.ds.manager.findOneByOrFail(GatewaySession, { rolloutId: f });
    expect(session).toMatchObject({ status: 'closed', callCount: 30, callsAdmitted: 30 });
    expect(session.refusedBudget).toBeGreaterThan(0);
    expect(session.refusedRate).toBeGreaterThan(0);
    expect(fo.callsRefused).toEqual({ budget: session.refusedBudget, rate: session.refusedRate });
    const completed = (await completedOf(f)).payload as Record<string, unknown>;
    expect(completed).toMatchObject({ finishReason: 'max_steps', numCalls: 30, callsRefused: fo.callsRefused });

    // What the agent saw: answers and 429s (rate refusals with Retry-After), nothing else; what
    // its last requests got (up to one per loop) was in flight as it was stopped, and it never read.
    const seen = JSON.parse(fo.blackBox!.stdout.trim().split('\n').at(-1)!) as {
      ok: number[];
      budget: number;
      rate: number;
      rateWithoutRetryAfter: number;
      other: Record<string, number>;
    };
    expect(seen.ok.length).toBeLessThanOrEqual(30);
    expect(seen.other).toEqual({});
    expect(seen.rateWithoutRetryAfter).toBe(0);
    expect(seen.budget).toBeGreaterThan(0);
    expect(seen.budget).toBeLessThanOrEqual(session.refusedBudget);
    expect(seen.rate).toBeLessThanOrEqual(session.refusedRate);
    expect(30 + session.refusedBudget + session.refusedRate - seen.ok.length - seen.budget - seen.rate).toBeLessThanOrEqual(8);
    // The rate held across both instances: the k-th answer came no sooner than the bucket allowed
    // (burst 5, then 20/s), whatever instance admitted it.
    seen.ok.forEach((ms, i) =>
      expect(ms, `answer ${i + 1}`).toBeGreaterThanOrEqual(((i + 1 - limits.burst) / limits.callsPerSecond) * 1000 - 25),
    );

    // Nothing past the budget was recorded: 30 capture rows, 30 llm_call.recorded in Kafka.
    const rows = (await stack.ds.query(`SELECT count(*)::int AS n FROM gateway_calls WHERE session_id = $1`, [session.id])) as {
      n: number;
    }[];
    expect(rows[0].n).toBe(30);
    await until(
      '30 llm_call.recorded',
      () => stack.of('llm_call.recorded').filter((e) => (e.payload as { rolloutId: string }).rolloutId === f).length >= 30 || undefined,
    );
    await new Promise((r) => setTimeout(r, 500));
    expect(stack.of('llm_call.recorded').filter((e) => (e.payload as { rolloutId: string }).rolloutId === f)).toHaveLength(30);

    // Counted in the gateways' metrics, both instances together, by reason.
    const after = [await refusedOn(stack.gatewayUrl), await refusedOn(second.url)];
    const delta = (k: 'budget' | 'rate') => after[0][k] + after[1][k] - before[0][k] - before[1][k];
    expect({ budget: delta('budget'), rate: delta('rate') }).toEqual(fo.callsRefused);
    // Both instances answered the agent.
    expect(after[1].budget + after[1].rate).toBeGreaterThan(before[1].budget + before[1].rate);

    // The rollout beside it, under the same limits, never met them.
    expect(po).toMatchObject({ finishReason: 'completed', numCalls: 3, callsRefused: { budget: 0, rate: 0 }, outcomeReward: 1 });
    expect(po.blackBox?.finalAnswer).toBe('done');
  });
});

describe('call limits on the white-box loop', () => {
  const chainAdd = (id: string, limits: Record<string, number>) =>
    runtime.loadBuiltin({
      id,
      env: 'chain-add',
      envConfig: { k: 4, maxOperand: 99 },
      seed: 5,
      trainCount: 1,
      evalCount: 0,
      sampling: { temperature: 1, maxTokens: 96 },
      limits: { timeoutMs: 60_000, ...limits },
    });

  it('ends as max_steps when its budget is spent, with the calls it made recorded and the refusal counted', async () => {
    await chainAdd('wb-budget', { maxCalls: 2 });
    const id = (await runtime.submit({ taskSetId: 'wb-budget', groupSize: 1 })).rolloutIds[0];
    const o = await outcomeOf(id);
    expect(o).toMatchObject({ finishReason: 'max_steps', numCalls: 2, callsRefused: { budget: 1, rate: 0 } });
    expect((await completedOf(id)).payload).toMatchObject({ finishReason: 'max_steps', callsRefused: { budget: 1, rate: 0 } });
  });

  it('waits out a rate limit and completes as usual', async () => {
    await chainAdd('wb-rate', { callsPerSecond: 5, burst: 1 });
    const id = (await runtime.submit({ taskSetId: 'wb-rate', groupSize: 1 })).rolloutIds[0];
    const o = await outcomeOf(id);
    expect(o).toMatchObject({ finishReason: 'completed', outcomeReward: 1, numCalls: 4 });
    expect(o.callsRefused?.rate).toBeGreaterThan(0);
    // Four calls from a bucket of one at 5/s: three refills of 200 ms at least.
    expect(o.agentMs).toBeGreaterThanOrEqual(590);
  });
});
