import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOPICS, type AnyEventEnvelope } from '@anvil/contracts';
import { createBus, type MessageBus, type Subscription } from '@anvil/messaging';
import { Client } from 'pg';
import { createScratchDatabase, startService, waitFor, type ScratchDatabase, type ServiceProcess } from '@anvil/testing';

/**
 * Codex CLI and Claude Code, unchanged (pinned, installed into .cache/agents by
 * tools/agents/install.mjs), as black-box agents of the rollout manager: the built
 * inference-proxy (embedded engine, built-in tiny model) ← gateway ← rollout-manager on the real
 * Kafka broker and PostgreSQL. Each CLI runs offline through its invocation script
 * (tools/agents/codex.sh: `codex exec` with a model provider on the session's base URL and
 * wire_api "responses"; tools/agents/claude-code.sh: `claude -p` with ANTHROPIC_BASE_URL), in its
 * compact form so that its prompt fits the tiny model's 8192 positions. Every rollout finishes with
 * a reason, its calls are recorded (PostgreSQL and Kafka) and its session closed, and the calls
 * came through the Responses and the Messages routes.
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS;
const DATABASE_URL = process.env.DATABASE_URL;
if (!KAFKA_BROKERS || !DATABASE_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
const root = join(__dirname, '..', '..');
const topicPrefix = `e2e-clis-${process.pid}.`;
const ADMIN = 'e2e-agent-clis-admin-0123456789abcdefghij';

let db: ScratchDatabase;
let pg: Client;
let proxy: ServiceProcess;
let gateway: ServiceProcess;
let manager: ServiceProcess;
let bus: MessageBus;
let sub: Subscription;
const events: AnyEventEnvelope[] = [];
const ready = (svc: ServiceProcess) =>
  waitFor(`${svc.app} /readyz`, async () => ((await fetch(`${svc.baseUrl}/readyz`)).status === 200 ? true : undefined), 120_000, 250);

beforeAll(async () => {
  // The CLIs come from npm at pinned versions (idempotent: nothing is fetched once they are there).
  const installed = spawnSync('node', [join(root, 'tools', 'agents', 'install.mjs')], { encoding: 'utf8' });
  if (installed.status !== 0) throw new Error(`node tools/agents/install.mjs failed: ${installed.stderr}`);
  db = await createScratchDatabase(DATABASE_URL, 'anvil_e2e_agent_clis');
  pg = new Client({ connectionString: db.url });
  await pg.connect();
  const common = { KAFKA_BROKERS, DATABASE_URL: db.url, KAFKA_TOPIC_PREFIX: topicPrefix, LOG_LEVEL: 'info' };
  bus = createBus({ kind: 'kafka', brokers: KAFKA_BROKERS.split(','), clientId: 'e2e-agent-clis', topicPrefix });
  sub = await bus.subscribe({
    group: `e2e.clis.watch.${process.pid}`,
    topics: [TOPICS.rollouts, TOPICS.llmCalls],
    fromBeginning: true,
    handler: async (e) => void events.push(e),
  });
  proxy = await startService('inference-proxy', { ...common, INFERENCE_BACKEND: 'embedded', DEPLOYMENT_NAME: 'e2e-clis' }, 120_000);
  await ready(proxy);
  gateway = await startService(
    'gateway',
    {
      ...common,
      GATEWAY_ADMIN_TOKEN: ADMIN,
      INFERENCE_PROXY_URL: proxy.baseUrl,
      GATEWAY_POLICY_GROUP: `e2e.clis.gw.${process.pid}`,
      MAX_STALENESS: '100',
      // Codex asks for no limit, so it gets this default: room for the random tiny model to reach its
      // end-of-turn token (Codex, like OpenAI's clients, fails a response left incomplete at the limit).
      GATEWAY_DEFAULT_MAX_TOKENS: '3072',
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
      MAX_CONCURRENT_ROLLOUTS: '4',
      MAX_STALENESS: '100',
      ROLLOUT_CONSUMER_GROUP: `e2e.clis.${process.pid}`,
    },
    120_000,
  );
  await ready(manager);
}, 300_000);

afterAll(async () => {
  await Promise.all([manager, gateway, proxy].map((s) => s?.stop('SIGTERM')));
  await sub?.stop();
  await bus?.close();
  await pg?.end();
  await db?.drop();
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

const ofRollout = (type: string, id: string) =>
  events.filter((e) => e.type === type && (e.payload as { rolloutId: string }).rolloutId === id);

/** Scores a rollout 1 when the gateway recorded calls for it (the calls the verifier is given). */
const verifier = {
  kind: 'command',
  command: [
    'node',
    '-e',
    `let t='';process.stdin.on('data',d=>t+=d).on('end',()=>{const c=JSON.parse(t).calls||[];console.log(JSON.stringify({outcomeReward:c.length>0?1:0}))})`,
  ],
  mode: 'json',
  timeoutMs: 20_000,
};

const clis = [
  {
    id: 'e2e-codex',
    name: 'codex',
    script: 'tools/agents/codex.sh',
    // Inside the rollout's sandbox, Codex's own sandbox for its commands would only confine them twice.
    env: { AGENT_COMPACT: '1', CODEX_SANDBOX_MODE: 'danger-full-access' },
    route: 'responses',
  },
  {
    id: 'e2e-claude-code',
    name: 'claude-code',
    script: 'tools/agents/claude-code.sh',
    env: { AGENT_COMPACT: '1', AGENT_MAX_REPLY: '3072' },
    route: 'messages',
  },
];

describe('Codex CLI and Claude Code as black-box agents (offline, against the embedded tiny model)', () => {
  it('runs each CLI per task through the rollout manager: every rollout finishes with a reason and its calls are recorded', async () => {
    const ids: Record<string, string[]> = {};
    for (const c of clis) {
      const jsonl = ['List the files here.', 'Say hello.'].map((prompt, i) => JSON.stringify({ id: `${c.name}-${i}`, prompt })).join('\n');
      await api(
        'task-sets',
        {
          spec: {
            id: c.id,
            agent: {
              kind: 'black-box',
              name: c.name,
              command: ['sh', c.script, '{prompt}'],
              taskInput: 'file',
              env: c.env,
              // Its sandbox shows it its invocation script and the installed CLIs, nothing else of the repository.
              readOnlyPaths: ['tools/agents', '.cache/agents'],
            },
            verifier,
            groupSize: 1,
            limits: { timeoutMs: 240_000 },
          },
          jsonl,
        },
        201,
      );
      ids[c.id] = (await api<{ rolloutIds: string[] }>('submissions', { taskSetId: c.id }, 202)).rolloutIds;
      expect(ids[c.id]).toHaveLength(2);
    }
    const all = Object.values(ids).flat();
    await waitFor(
      'every rollout.completed',
      async () => (all.every((id) => ofRollout('rollout.completed', id).length > 0) ? true : undefined),
      480_000,
      250,
    );

    for (const c of clis) {
      for (const id of ids[c.id]) {
        const done = ofRollout('rollout.completed', id)[0].payload as {
          finishReason: string;
          error: string | null;
          numCalls: number;
          outcomeReward: number | null;
        };
        // The CLI ran to its end and exited 0 (its answer is whatever the random model said).
        expect(done.finishReason, `${c.name} ${id}: ${done.error}`).toBe('completed');
        const { rows } = await pg.query<{ id: string }>(
          `SELECT c.id FROM gateway_calls c JOIN gateway_sessions s ON s.id = c.session_id WHERE s.rollout_id = $1 ORDER BY c.turn_index`,
          [id],
        );
        expect(rows.length, `${c.name} ${id}`).toBeGreaterThan(0);
        expect(done.numCalls).toBe(rows.length);
        expect(done.outcomeReward).toBe(1);
        await waitFor(
          `${id} llm_call.recorded`,
          async () => (ofRollout('llm_call.recorded', id).length === rows.length ? true : undefined),
          30_000,
        );
      }
    }
    const { rows: sessions } = await pg.query<{ status: string }>(`SELECT status FROM gateway_sessions WHERE rollout_id = ANY($1)`, [all]);
    expect(sessions.map((s) => s.status)).toEqual(all.map(() => 'closed'));
    // Codex spoke the Responses API and Claude Code the Messages API (the gateway's answered calls by route).
    const metrics = await (await fetch(`${gateway.baseUrl}/metrics`)).text();
    for (const route of ['responses', 'messages'])
      expect(metrics).toMatch(new RegExp(`anvil_gateway_call_seconds_count\\{[^}]*route="${route}"[^}]*\\} [1-9]`));
  }, 600_000);
});
