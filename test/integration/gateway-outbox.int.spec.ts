import { randomBytes } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { llmCallDelta, PromptChain, TOPICS, type AnyEventEnvelope, type EventEnvelope } from '@anvil/contracts';
import { sampleLlmCallEvent } from '@anvil/contracts/testing';
import { createBus, stderrLogger, type KafkaConsumerTuning, type MessageBus } from '@anvil/messaging';
import { createDataSource, runMigrations } from '@anvil/persistence';
import { createScratchDatabase, waitFor, type ScratchDatabase } from '@anvil/testing';
import {
  CaptureStore,
  storedCapture,
  type CaptureState,
  OutboxRelay,
  RecordCommitter,
  type CommitRequest,
  SqlClient,
} from '@anvil/gateway/testing';

/**
 * The gateway's outbox on the real server and broker: a call is answered once its statement
 * commits; a gateway that "dies" between that commit and the publish (its broker never
 * acknowledges, and it is abandoned without draining) loses no record: another relay's
 * sweeper publishes every row, with the turn its statement reserved, and deletes it.
 */
const serverUrl = process.env.DATABASE_URL;
if (!serverUrl) throw new Error('DATABASE_URL is not set (npm test starts a server)');
const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
if (brokers.length === 0) throw new Error('KAFKA_BROKERS is not set (npm test starts a broker)');

const fastGroups: KafkaConsumerTuning = {
  sessionTimeoutMs: 6_000,
  heartbeatIntervalMs: 500,
  rebalanceTimeoutMs: 10_000,
  maxWaitTimeMs: 200,
};
const ns = `anvoutbox.${Date.now().toString(36)}.`;
let db: ScratchDatabase;
let ds: DataSource;
let sql: SqlClient;
const buses: MessageBus[] = [];
const openBus = () => {
  const bus = createBus({
    kind: 'kafka',
    brokers,
    clientId: 'outbox-int',
    topicPrefix: ns,
    consumer: fastGroups,
    logger: stderrLogger('error'),
    partitions: 1,
  });
  buses.push(bus);
  return bus;
};

beforeAll(async () => {
  db = await createScratchDatabase(serverUrl, 'anvil_outbox');
  ds = createDataSource({ url: db.url, poolSize: 5 });
  await ds.initialize();
  await runMigrations(ds);
  sql = new SqlClient(ds);
});

afterAll(async () => {
  await Promise.all(buses.map((b) => b.close()));
  await ds?.destroy();
  await db?.drop();
});

const openSession = async (id: string) =>
  ds.query(
    `INSERT INTO "gateway_sessions" ("id", "key_hash", "rollout_id", "group_id", "task_id", "model", "status") VALUES ($1, $2, $3, 'g', 't', 'anvil-tiny', 'open')`,
    [id, randomBytes(16).toString('hex'), `rollout-${id}`],
  );

/** A request of `n` choices whose events carry turns 0..n-1 (the committer adds the reserved first turn). */
const request = (sessionId: string, n: number): CommitRequest => ({
  sessionId,
  calls: n,
  newBranches: 1,
  captures: [],
  records: Array.from({ length: n }, (_, i) => {
    const e = sampleLlmCallEvent({
      promptTokens: 300,
      outputTokens: 20,
      turnIndex: i,
      rolloutId: `rollout-${sessionId}`,
      seed: randomBytes(4).readUInt32LE(),
    });
    return { ...e, id: e.payload.callId, payload: { ...e.payload, sessionId } };
  }),
});

const outboxCount = async (sessionId: string) =>
  Number(((await ds.query(`SELECT count(*) AS "n" FROM "gateway_outbox" WHERE "session_id" = $1`, [sessionId])) as { n: string }[])[0].n);

async function consumeRecords(group: string, into: EventEnvelope<'llm_call.recorded'>[]) {
  return openBus().subscribe({
    group,
    topics: [TOPICS.llmCalls],
    fromBeginning: true,
    handler: async (e: AnyEventEnvelope) => void (e.type === 'llm_call.recorded' && into.push(e)),
  });
}

describe('gateway outbox (real PostgreSQL and Kafka)', () => {
  it('publishes right after the commit and deletes the rows', async () => {
    await openSession('s-fast');
    const relay = new OutboxRelay(sql, openBus(), { deleteDelayMs: 10 });
    const committer = new RecordCommitter(sql, relay);
    const reqs = [request('s-fast', 2), request('s-fast', 1)];
    expect(await Promise.all(reqs.map((r) => committer.commit(r)))).toEqual([{ firstTurn: 0 }, { firstTurn: 2 }]);
    const got: EventEnvelope<'llm_call.recorded'>[] = [];
    const sub = await consumeRecords('outbox-fast', got);
    await waitFor(
      'three records',
      async () => (got.filter((e) => e.payload.sessionId === 's-fast').length >= 3 ? true : undefined),
      30_000,
    );
    expect(got.filter((e) => e.payload.sessionId === 's-fast').map((e) => e.payload.turnIndex)).toEqual([0, 1, 2]);
    await waitFor('rows deleted', async () => ((await outboxCount('s-fast')) === 0 ? true : undefined), 5_000);
    expect(await relay.drain(1_000)).toBe(true);
    await sub.stop();
  });

  it('rebuilds the prompts of captured calls (stored as deltas) when a sweeper publishes them', async () => {
    await openSession('s-delta');
    const hung: MessageBus = { ...openBus(), publish: () => new Promise<void>(() => undefined) } as MessageBus;
    const dying = new RecordCommitter(sql, new OutboxRelay(sql, hung));
    // Two chat turns: the second extends the first, so its capture row is a delta of it.
    const [first, second] = [request('s-delta', 1), request('s-delta', 1)];
    const e1 = first.records[0];
    const e2 = second.records[0];
    const state = (e: EventEnvelope<'llm_call.recorded'>, promptIds: number[], parentCallId: string | null): CaptureState => ({
      callId: e.id,
      sessionId: 's-delta',
      branchId: 'b',
      parentCallId,
      turnIndex: 0,
      replyFingerprint: `fp-${e.id}`,
      messages: [{ role: 'user', content: e.id }],
      assistantMessage: { role: 'assistant', content: 'ok' },
      tools: null,
      templateExtra: {},
      promptIds,
      outputIds: Array.from(e.payload.outputIds),
    });
    const p1 = Array.from(e1.payload.promptDeltaIds); // a first call reuses nothing: its delta is its whole prompt
    const s1 = state(e1, p1, null);
    const p2 = [...p1, ...e1.payload.outputIds, 7, 8, 9];
    Object.assign(e2.payload, llmCallDelta(p2, p1.length + e1.payload.outputIds.length), { parentCallId: e1.id });
    const s2 = state(e2, p2, e1.id);
    (first as { captures: CommitRequest['captures'] }).captures = [{ turn: 0, row: storedCapture(s1, null) }];
    (second as { captures: CommitRequest['captures'] }).captures = [{ turn: 0, row: storedCapture(s2, s1) }];
    expect(second.captures[0].row.promptPrefixTokens).toBe(e2.payload.reusedPromptTokens);
    await dying.commit(first);
    await dying.commit(second);
    const stored = (await ds.query(
      `SELECT "event_id", "prompt_from_capture", length("frame") AS "bytes" FROM "gateway_outbox" WHERE "session_id" = 's-delta' ORDER BY "turn_index"`,
    )) as {
      prompt_from_capture: boolean;
      bytes: number;
    }[];
    expect(stored.map((r) => r.prompt_from_capture)).toEqual([true, true]);

    const got: EventEnvelope<'llm_call.recorded'>[] = [];
    const sub = await consumeRecords('outbox-delta', got);
    const fresh = new CaptureStore(sql); // another gateway: nothing cached, the chain is read back
    const survivor = new OutboxRelay(sql, openBus(), { staleAfterMs: 0, promptOf: (id) => fresh.promptIdsOf(id) });
    expect(await survivor.sweep()).toBe(2);
    await waitFor('two records', async () => (got.filter((e) => e.payload.sessionId === 's-delta').length >= 2 ? true : undefined), 30_000);
    const mine = got.filter((e) => e.payload.sessionId === 's-delta');
    const chain = new PromptChain();
    expect(mine.map((e) => Array.from(chain.fullPrompt(e.payload)))).toEqual([p1, p2]);
    expect(mine.map((e) => e.payload.reusedPromptTokens)).toEqual([e1.payload.reusedPromptTokens, e2.payload.reusedPromptTokens]);
    expect(mine.map((e) => e.payload.turnIndex)).toEqual([0, 1]);
    await sub.stop();
  });

  it('a gateway that dies between commit and publish loses nothing: the sweeper publishes its rows once, with their turns', async () => {
    await openSession('s-crash');
    // The dying gateway: its broker never acknowledges, and it is abandoned without draining.
    const hung: MessageBus = { ...openBus(), publish: () => new Promise<void>(() => undefined) } as MessageBus;
    const dying = new RecordCommitter(sql, new OutboxRelay(sql, hung));
    const sent = [request('s-crash', 1), request('s-crash', 3)];
    expect(await dying.commit(sent[0])).toEqual({ firstTurn: 0 });
    expect(await dying.commit(sent[1])).toEqual({ firstTurn: 1 });
    expect(await outboxCount('s-crash')).toBe(4);

    const got: EventEnvelope<'llm_call.recorded'>[] = [];
    const sub = await consumeRecords('outbox-crash', got);
    const survivor = new OutboxRelay(sql, openBus(), { staleAfterMs: 0 });
    expect(await survivor.sweep()).toBe(4);
    expect(await outboxCount('s-crash')).toBe(0);
    await waitFor(
      'four records',
      async () => (got.filter((e) => e.payload.sessionId === 's-crash').length >= 4 ? true : undefined),
      30_000,
    );
    await new Promise((r) => setTimeout(r, 500));
    const mine = got.filter((e) => e.payload.sessionId === 's-crash');
    expect(mine.map((e) => e.payload.turnIndex)).toEqual([0, 1, 2, 3]);
    // Token-exact: what reached Kafka is what was committed.
    const byId = new Map(sent.flatMap((r) => r.records).map((e) => [e.id, e]));
    for (const e of mine) {
      const original = byId.get(e.id);
      expect(original).toBeDefined();
      expect([e.payload.promptLength, e.payload.reusedPromptTokens, Array.from(e.payload.promptDeltaIds)]).toEqual([
        original?.payload.promptLength,
        original?.payload.reusedPromptTokens,
        Array.from(original?.payload.promptDeltaIds ?? []),
      ]);
      expect(Array.from(e.payload.outputLogprobs)).toEqual(Array.from(original?.payload.outputLogprobs ?? []));
    }
    expect(await survivor.sweep()).toBe(0);
    await sub.stop();
  });
});
