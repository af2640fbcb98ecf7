import type { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { llmCallDelta, PromptChain, TOPICS, type EventEnvelope, type LlmCallRecordedV1 } from '@anvil/contracts';
import { sampleLlmCallEvent } from '@anvil/contracts/testing';
import { createBus, type MessageBus, type Subscription } from '@anvil/messaging';
import { createDataSource, runMigrations } from '@anvil/persistence';
import { createScratchDatabase, startService, waitFor, type ScratchDatabase, type ServiceProcess } from '@anvil/testing';
import { storedCapture, type CaptureState, OutboxRelay, RecordCommitter, type CommitRequest, SqlClient } from '@anvil/gateway/testing';

/**
 * "A crash after answering loses no record", with the built gateway as a process on
 * the real broker and server. A gateway that died between commit and publish is played by the
 * gateway's own RecordCommitter in this process, whose broker never acknowledges: its calls are
 * committed (they would have been answered) and their events sit in the outbox, one of them a
 * chat turn stored as a delta without its prompt. Then a real gateway starts on the same
 * database: its sweeper publishes every record to Kafka, once, with the reserved turn and the
 * exact prompt rebuilt from the capture chain, and empties the outbox.
 *
 * Its own database: in one deployment every gateway shares database and topics, but the other
 * e2e files use other topic prefixes, and their gateways' sweepers must not see these rows.
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS;
const SERVER_URL = process.env.DATABASE_URL;
if (!KAFKA_BROKERS || !SERVER_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
const topicPrefix = `e2e-gwoutbox-${process.pid}.`;
let db: ScratchDatabase;
let ds: DataSource;
let gateway: ServiceProcess | undefined;
let bus: MessageBus;
let sub: Subscription;
/** Records as received, with whole prompts rebuilt along the call chain (v2 carries deltas). */
const records = new Map<string, Omit<EventEnvelope<'llm_call.recorded'>, 'payload'> & { payload: LlmCallRecordedV1 }>();
const chain = new PromptChain();
let deliveries = 0;

beforeAll(async () => {
  db = await createScratchDatabase(SERVER_URL, 'anvil_e2e_outbox');
  ds = createDataSource({ url: db.url, poolSize: 4 });
  await ds.initialize();
  await runMigrations(ds);
  bus = createBus({ kind: 'kafka', brokers: KAFKA_BROKERS.split(','), clientId: 'e2e-gateway-outbox', topicPrefix });
  sub = await bus.subscribe({
    group: 'e2e.gateway-outbox.records',
    topics: [TOPICS.llmCalls],
    fromBeginning: true,
    handler: async (e) => {
      if (e.type !== 'llm_call.recorded') return;
      deliveries++;
      records.set(e.id, { ...e, payload: chain.materialize(e.payload) });
    },
  });
});

afterAll(async () => {
  await gateway?.stop('SIGTERM');
  await sub?.stop();
  await bus?.close();
  await ds?.destroy();
  await db?.drop();
});

const event = (sessionId: string, seed: number, turn: number) => {
  const e = sampleLlmCallEvent({ promptTokens: 200, outputTokens: 12, turnIndex: turn, rolloutId: `rollout-${sessionId}`, seed });
  return { ...e, id: e.payload.callId, payload: { ...e.payload, sessionId } };
};
const captureOf = (e: EventEnvelope<'llm_call.recorded'>, promptIds: number[], parentCallId: string | null): CaptureState => ({
  callId: e.id,
  sessionId: e.payload.sessionId,
  branchId: 'b0',
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

describe('gateway outbox recovery (built gateway, real Kafka and PostgreSQL)', () => {
  it('a new gateway publishes the records a dead one committed but never published, each once, token-exact', async () => {
    const sessionId = 'sess-outbox-e2e';
    await ds.query(
      `INSERT INTO "gateway_sessions" ("id", "key_hash", "rollout_id", "group_id", "task_id", "model", "status") VALUES ($1, 'h', $2, 'g', 't', 'anvil-tiny', 'open')`,
      [sessionId, `rollout-${sessionId}`],
    );
    const sql = new SqlClient(ds);
    const neverAcks = { publish: () => new Promise<void>(() => undefined) } as unknown as MessageBus;
    const dead = new RecordCommitter(sql, new OutboxRelay(sql, neverAcks));

    // Turn 0: a chat call (capture row whole); turn 1 extends it (capture row a delta); turns 2-3: a completion with n = 2 (no capture).
    const t0 = event(sessionId, 11, 0);
    const t1 = event(sessionId, 12, 0);
    const p0 = Array.from(t0.payload.promptDeltaIds); // a first call reuses nothing: its delta is its whole prompt
    const p1 = [...p0, ...t0.payload.outputIds, 5, 6, 7];
    Object.assign(t1.payload, llmCallDelta(p1, p0.length + t0.payload.outputIds.length), { parentCallId: t0.id });
    const c0 = captureOf(t0, p0, null);
    const reqs: CommitRequest[] = [
      { sessionId, calls: 1, newBranches: 1, captures: [{ turn: 0, row: storedCapture(c0, null) }], records: [t0] },
      { sessionId, calls: 1, newBranches: 0, captures: [{ turn: 0, row: storedCapture(captureOf(t1, p1, t0.id), c0) }], records: [t1] },
      { sessionId, calls: 2, newBranches: 1, captures: [], records: [event(sessionId, 13, 0), event(sessionId, 14, 1)] },
    ];
    const wholePrompt = (e: EventEnvelope<'llm_call.recorded'>) => (e.id === t1.id ? p1 : Array.from(e.payload.promptDeltaIds));
    const expected = reqs.flatMap((r) =>
      r.records.map((e) => ({
        id: e.id,
        promptIds: wholePrompt(e),
        outputIds: Array.from(e.payload.outputIds),
        reused: e.payload.reusedPromptTokens,
      })),
    );
    for (const r of reqs) expect(await dead.commit(r)).not.toBeNull();
    const count = async () => Number(((await ds.query(`SELECT count(*) AS "n" FROM "gateway_outbox"`)) as { n: string }[])[0].n);
    expect(await count()).toBe(4);
    await new Promise((r) => setTimeout(r, 200));
    expect(records.size).toBe(0);

    gateway = await startService('gateway', {
      KAFKA_BROKERS,
      DATABASE_URL: db.url,
      KAFKA_TOPIC_PREFIX: topicPrefix,
      LOG_LEVEL: 'info',
      GATEWAY_ADMIN_TOKEN: 'e2e-gateway-outbox-admin-token-0123456789abc',
      INFERENCE_PROXY_URL: 'http://127.0.0.1:9', // no call is made in this test
      GATEWAY_MODEL_NAME: 'anvil-tiny',
      GATEWAY_OUTBOX_STALE_MS: '0',
      GATEWAY_OUTBOX_SWEEP_MS: '500',
    });
    await waitFor('four records in Kafka', async () => (records.size >= 4 ? true : undefined), 60_000, 100);
    await waitFor('outbox empty', async () => ((await count()) === 0 ? true : undefined), 10_000, 100);
    await new Promise((r) => setTimeout(r, 1_500)); // later sweeps publish nothing more
    expect(records.size).toBe(4);
    expect(deliveries).toBe(4);
    const got = expected.map((x) => records.get(x.id));
    expect(got.map((e) => e?.payload.turnIndex)).toEqual([0, 1, 2, 3]);
    for (const [i, x] of expected.entries()) {
      expect(Array.from(got[i]?.payload.promptIds ?? []), x.id).toEqual(x.promptIds);
      expect(Array.from(got[i]?.payload.outputIds ?? [])).toEqual(x.outputIds);
      expect(got[i]?.payload.reusedPromptTokens).toBe(x.reused);
    }
    const metrics = await (await fetch(`${gateway.baseUrl}/metrics`)).text();
    expect(metrics).toMatch(/anvil_gateway_outbox_published_total\{[^}]*via="sweep"[^}]*\} 4\n/);
  });
});
