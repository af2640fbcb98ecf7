import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEvent, TOPICS, type AnyEventEnvelope, type EventEnvelope } from '@anvil/contracts';
import { createBus, type MessageBus, type Subscription } from '@anvil/messaging';
import { Client } from 'pg';
import { createScratchDatabase, startService, waitFor, type ScratchDatabase, type ServiceProcess } from '@anvil/testing';
import { pythonAgentPaths } from '../integration/fixtures/agent-paths';

/**
 * The built services as their own processes on the real Kafka broker and PostgreSQL server:
 * inference-proxy (embedded engine, built-in tiny model) ← gateway ← rollout-manager, driven
 * through the manager's HTTP API like a user would. Task sets of black-box agent processes (our
 * Python agent on the openai package, the llm CLI from PyPI, shell agents on curl) run end to
 * end: every rollout's rollout.started and rollout.completed in Kafka once, its calls in
 * PostgreSQL and on Kafka, its session closed, and its rewards (outcome and per-call process
 * rewards) what the verifier computes from the calls the gateway recorded. A weight update in
 * the middle shows the partial-rollout choice of each task set in the per-token versions:
 * abort-and-resume splits a running call between two versions, finish keeps every call on one;
 * rollouts that crossed it say versionsSpanned 2.
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS;
const DATABASE_URL = process.env.DATABASE_URL;
if (!KAFKA_BROKERS || !DATABASE_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
const topicPrefix = `e2e-rm-${process.pid}.`;
const ADMIN = 'e2e-rollout-manager-admin-0123456789abcdef';

let db: ScratchDatabase;
let pg: Client;
let proxy: ServiceProcess;
let gateway: ServiceProcess;
let manager: ServiceProcess;
let bus: MessageBus;
let sub: Subscription;
const events: AnyEventEnvelope[] = [];
const ckptDir = mkdtempSync(join(tmpdir(), 'anvil-e2e-rm-ckpt-'));
const ready = (svc: ServiceProcess) =>
  waitFor(`${svc.app} /readyz`, async () => ((await fetch(`${svc.baseUrl}/readyz`)).status === 200 ? true : undefined), 120_000, 250);

beforeAll(async () => {
  for (const [cmd, hint] of [
    ['python3 -c "import openai"', 'the openai package'],
    ['llm --version', 'the llm CLI'],
  ]) {
    if (spawnSync('sh', ['-c', cmd]).status !== 0)
      throw new Error(
        `this test runs ${hint} from PyPI: npm test installs examples/*/requirements.txt into .cache/python-agents (first on PATH)`,
      );
  }
  db = await createScratchDatabase(DATABASE_URL, 'anvil_e2e_rollout_manager');
  pg = new Client({ connectionString: db.url });
  await pg.connect();
  const common = { KAFKA_BROKERS, DATABASE_URL: db.url, KAFKA_TOPIC_PREFIX: topicPrefix, LOG_LEVEL: 'info' };
  bus = createBus({ kind: 'kafka', brokers: KAFKA_BROKERS.split(','), clientId: 'e2e-rollout-manager', topicPrefix });
  sub = await bus.subscribe({
    group: `e2e.rm.watch.${process.pid}`,
    topics: [TOPICS.rollouts, TOPICS.llmCalls, TOPICS.policyVersions],
    fromBeginning: true,
    handler: async (e) => void events.push(e),
  });
  proxy = await startService('inference-proxy', { ...common, INFERENCE_BACKEND: 'embedded', DEPLOYMENT_NAME: 'e2e-rm' }, 120_000);
  await ready(proxy);
  gateway = await startService(
    'gateway',
    {
      ...common,
      GATEWAY_ADMIN_TOKEN: ADMIN,
      INFERENCE_PROXY_URL: proxy.baseUrl,
      GATEWAY_POLICY_GROUP: `e2e.rm.gw.${process.pid}`,
      MAX_STALENESS: '100',
    },
    120_000,
  );
  await ready(gateway);
  manager = await startService(
    'rollout-manager',
    {
      ...common,
      GATEWAY_URL: gateway.baseUrl,
      GATEWAY_ADMIN_TOKEN: ADMIN,
      MAX_CONCURRENT_ROLLOUTS: '24',
      MAX_STALENESS: '100',
      ROLLOUT_CONSUMER_GROUP: `e2e.rm.${process.pid}`,
    },
    120_000,
  );
  await ready(manager);
});

afterAll(async () => {
  await Promise.all([manager, gateway, proxy].map((s) => s?.stop('SIGTERM')));
  await sub?.stop();
  await bus?.close();
  await pg?.end();
  await db?.drop();
  rmSync(ckptDir, { recursive: true, force: true });
});

async function api<T>(path: string, body: unknown, want: number): Promise<T> {
  const res = await fetch(`${manager.baseUrl}/internal/v1/${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status !== want) throw new Error(`POST ${path}: ${res.status} ${text}`);
  return JSON.parse(text) as T;
}

/** Scores the calls the gateway recorded (what the verifier gets as `calls`): a call earns 1 when its reply has a vowel; the outcome is the share that do. */
const VOWELS = /[aeiou]/;
const scorer = `let t='';process.stdin.on('data',d=>t+=d).on('end',()=>{const c=JSON.parse(t).calls||[];const v=c.map(x=>${VOWELS.toString()}.test(x.message.content||'')?1:0);console.log(JSON.stringify({outcomeReward:v.length?v.reduce((a,b)=>a+b,0)/v.length:0,processRewards:v}))})`;
const verifier = { kind: 'command', command: ['node', '-e', scorer], mode: 'json', timeoutMs: 20_000 };
const jsonl = (prefix: string, n: number) =>
  Array.from({ length: n }, (_, i) => JSON.stringify({ id: `${prefix}-${i}`, prompt: `Say something about ${i}.` })).join('\n');
/** A shell agent making `calls` chat calls of up to `maxTokens` tokens each, one after the other. */
const curlAgent = (calls: number, maxTokens: number) =>
  `for i in $(seq 1 ${calls}); do curl -sf -m 120 -X POST -H 'content-type: application/json' -d '{"model":"anvil-tiny","messages":[{"role":"user","content":"go on"}],"max_tokens":${maxTokens}}' "$OPENAI_BASE_URL/chat/completions" >/dev/null || exit 3; done; echo done`;

const ofRollout = (type: string, id: string) =>
  events.filter((e) => e.type === type && (e.payload as { rolloutId: string }).rolloutId === id);
const callsOf = (id: string) => ofRollout('llm_call.recorded', id) as EventEnvelope<'llm_call.recorded'>[];

/** The replies the gateway recorded for a rollout (PostgreSQL), in turn order. */
async function recordedReplies(rolloutId: string): Promise<{ id: string; content: string | null }[]> {
  const { rows } = await pg.query<{ id: string; m: string }>(
    `SELECT c.id, c.assistant_message_json AS m FROM gateway_calls c JOIN gateway_sessions s ON s.id = c.session_id WHERE s.rollout_id = $1 ORDER BY c.turn_index`,
    [rolloutId],
  );
  return rows.map((r) => ({ id: r.id, content: (JSON.parse(r.m) as { content: string | null }).content }));
}

describe('rollout-manager, gateway and inference-proxy as built processes', () => {
  it('runs task sets of black-box agent processes end to end: events once in Kafka, calls in PostgreSQL, rewards as the verifier computes them, and each task set’s partial-rollout choice across a weight update', async () => {
    // The partial-rollout sets go first, so that all 16 of their rollouts hold slots (24) from the start
    // and are still mid-loop when the update lands. Submitted after the other sets (a stop-26 flake),
    // they waited for slots, and the abort-and-resume rollouts could all have finished their calls
    // before the update was swapped in: no call left to split.
    const sets = [
      {
        id: 'e2e-resume',
        agent: { kind: 'black-box', name: 'curl-loop', command: ['sh', '-c', curlAgent(8, 400)] },
        weightSwap: 'abort-and-resume',
        n: 4,
      },
      {
        id: 'e2e-finish',
        agent: { kind: 'black-box', name: 'curl-loop', command: ['sh', '-c', curlAgent(8, 400)] },
        weightSwap: 'finish',
        n: 4,
      },
      {
        id: 'e2e-python',
        agent: {
          kind: 'black-box',
          name: 'python-openai',
          command: ['python3', 'examples/python-agent/agent.py'],
          readOnlyPaths: ['examples/python-agent', ...pythonAgentPaths()],
        },
        n: 4,
      },
      {
        id: 'e2e-llm',
        agent: {
          kind: 'black-box',
          name: 'llm-cli',
          command: ['sh', 'examples/llm-cli-agent/run.sh', '{prompt}'],
          taskInput: 'file',
          env: { LLM_MAX_REPLY: '48' },
          readOnlyPaths: ['examples/llm-cli-agent', ...pythonAgentPaths()],
        },
        n: 4,
      },
    ];
    const ids: Record<string, string[]> = {};
    for (const s of sets) {
      const { n, ...spec } = s;
      expect(
        await api<{ tasks: number }>(
          'task-sets',
          { spec: { ...spec, verifier, groupSize: 2, limits: { timeoutMs: 180_000 } }, jsonl: jsonl(s.id, n) },
          201,
        ),
      ).toMatchObject({ tasks: n });
      ids[s.id] = (await api<{ rolloutIds: string[] }>('submissions', { taskSetId: s.id }, 202)).rolloutIds;
      expect(ids[s.id]).toHaveLength(n * 2);
    }
    const all = Object.values(ids).flat();
    const partial = [...ids['e2e-resume'], ...ids['e2e-finish']];

    // A weight update while the partial-rollout sets are generating: a real checkpoint, its digest, weights.published.
    await waitFor(
      'calls of both partial-rollout sets recorded',
      async () => (['e2e-resume', 'e2e-finish'].every((s) => ids[s].filter((id) => callsOf(id).length > 0).length >= 2) ? true : undefined),
      120_000,
      20,
    );
    // The premise of the split below: abort-and-resume rollouts still have calls to make.
    expect(ids['e2e-resume'].filter((id) => ofRollout('rollout.completed', id).length === 0).length).toBeGreaterThan(0);
    const { Model, checkpointDigest } = await import('@anvil/engine');
    const next = Model.tiny({ seed: 3 });
    await next.save(ckptDir);
    next.dispose();
    await bus.publish(
      createEvent(
        'weights.published',
        {
          version: 1,
          parentVersion: 0,
          step: 1,
          checkpointId: 'e2e-rm-1',
          checkpointUri: ckptDir,
          format: 'hf-safetensors',
          sha256: await checkpointDigest(ckptDir),
          publishedAt: Date.now(),
        },
        { key: '1', producer: 'e2e' },
      ),
    );
    await waitFor(
      'policy_version.activated 1',
      async () => events.find((e) => e.type === 'policy_version.activated' && (e.payload as { version: number }).version === 1),
      120_000,
    );
    const activatedAt = (events.find((e) => e.type === 'policy_version.activated')?.payload as { activatedAt: number }).activatedAt;

    await waitFor(
      'every rollout.completed',
      async () => (all.every((id) => ofRollout('rollout.completed', id).length > 0) ? true : undefined),
      240_000,
      250,
    );
    // Give a duplicate the time to show up.
    await new Promise((r) => setTimeout(r, 1_000));

    for (const id of all) {
      const started = ofRollout('rollout.started', id);
      const completed = ofRollout('rollout.completed', id);
      expect(started.map((e) => e.id)).toEqual([`${id}:started`]);
      expect(completed.map((e) => e.id)).toEqual([`${id}:completed`]);
      const c = completed[0].payload as {
        finishReason: string;
        error: string | null;
        numCalls: number;
        outcomeReward: number | null;
        processRewards: { callId: string; value: number }[];
      };
      expect(c.finishReason, `${id}: ${c.error}`).toBe('completed');
      // Its calls: in PostgreSQL (the gateway's capture rows) and on Kafka, as many as it reported.
      const replies = await recordedReplies(id);
      expect(replies.length).toBeGreaterThan(0);
      expect(c.numCalls).toBe(replies.length);
      await waitFor(`${id} llm_call.recorded`, async () => (callsOf(id).length === replies.length ? true : undefined), 30_000);
      expect(new Set(callsOf(id).map((e) => e.payload.callId))).toEqual(new Set(replies.map((r) => r.id)));
      // Rewards: what the verifier computes from those calls, each process reward on its call.
      const scores = replies.map((r) => (VOWELS.test(r.content ?? '') ? 1 : 0));
      expect(c.processRewards).toEqual(replies.map((r, i) => ({ callId: r.id, value: scores[i] })));
      expect(c.outcomeReward).toBeCloseTo(scores.reduce((a: number, b) => a + b, 0) / scores.length, 12);
    }
    const { rows: sessions } = await pg.query<{ rollout_id: string; status: string }>(
      `SELECT rollout_id, status FROM gateway_sessions WHERE rollout_id = ANY($1)`,
      [all],
    );
    expect(new Set(sessions.map((s) => s.rollout_id))).toEqual(new Set(all));
    expect(sessions.filter((s) => s.status !== 'closed')).toEqual([]);
    // Not all rewards are alike: the verifier really judged what came back.
    const outcomes = all.map((id) => (ofRollout('rollout.completed', id)[0].payload as { outcomeReward: number }).outcomeReward);
    expect(new Set(outcomes).size).toBeGreaterThan(1);

    // Partial rollouts: per-token versions of the calls that ran across the update.
    const versionsOf = (id: string) => callsOf(id).map((e) => [...e.payload.outputVersions]);
    const mixed = (vs: number[]) => vs.includes(0) && vs.includes(1);
    const resumed = ids['e2e-resume'].flatMap(versionsOf).filter(mixed);
    expect(resumed.length, 'an abort-and-resume call split by the update').toBeGreaterThan(0);
    // Interrupted at a token boundary: the tokens before the switch keep version 0, all after are 1.
    for (const vs of resumed) expect(vs).toEqual([...vs.slice(0, vs.indexOf(1)).map(() => 0), ...vs.slice(vs.indexOf(1)).map(() => 1)]);
    const finished = ids['e2e-finish'].flatMap(versionsOf);
    expect(finished.filter(mixed), 'a finish call split by the update').toEqual([]);
    expect(finished.some((vs) => vs[0] === 0) && finished.some((vs) => vs[0] === 1)).toBe(true);
    for (const id of partial) {
      const spanned = (ofRollout('rollout.completed', id)[0].payload as { versionsSpanned: number }).versionsSpanned;
      const tokenVersions = new Set(versionsOf(id).flat());
      expect(spanned).toBeGreaterThanOrEqual(tokenVersions.size);
      if (tokenVersions.size === 2) expect(spanned).toBe(2);
    }
    for (const s of ['e2e-resume', 'e2e-finish']) {
      expect(
        ids[s].some((id) => new Set(versionsOf(id).flat()).size === 2),
        `${s}: a rollout with tokens of both versions`,
      ).toBe(true);
    }
    // The rollouts of the other sets that ran wholly before the update say 1.
    for (const id of [...ids['e2e-python'], ...ids['e2e-llm']]) {
      const done = ofRollout('rollout.completed', id)[0].payload as { versionsSpanned: number; completedAt: number };
      if (done.completedAt < activatedAt) expect(done.versionsSpanned).toBe(1);
    }
  });
});
