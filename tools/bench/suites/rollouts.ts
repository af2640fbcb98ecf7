/**
 * `npm run bench -- rollouts`: what the rollout manager sustains, what it adds to rollout wall
 * time over the agents' own time, and what the agents' sandbox costs.
 *  - The real gateway (GatewayApiModule, its own process) on real PostgreSQL and Kafka, in front
 *    of a fixed-latency generation backend (the inference-proxy's /internal/v1/generate protocol,
 *    BENCH_RM_LATENCY_MS per call, default 50, answering chain-add moves so every white-box
 *    rollout makes k calls), GATEWAY_CAPTURE per BENCH_RM_CAPTURE (default on; off skips the
 *    gateway's record path, which the gateway suite benchmarks, and then black-box calls are not
 *    counted: the session's callCount is the count).
 *  - The manager (RolloutRuntime) in this process: white-box chain-add (k = 3: 3 calls) at 64, 256
 *    and 1024 concurrent agents; black-box agents (a shell script making 2 chat calls with curl)
 *    at 64 and 256 concurrent processes (at least BENCH_RM_BLACK_MIN_ROLLOUTS = 128 rollouts a run),
 *    each run once unsandboxed (sandbox none) and once in the local sandbox on the same workload, BENCH_RM_SANDBOX_ROUNDS times (default 2) in alternating
 *    order, so the load other processes put on a shared machine falls on both alike.
 *  - The sandbox's cost: start-to-first-call, from the rollout's slot to its agent's first call
 *    reaching the generation backend (the agent names its workspace in that call; the backend
 *    notes when each first arrives), p50/p99 per run, and rollouts/s; per N, local against none
 *    over the pooled rounds (target: local adds < 50 ms p50 and costs < 5% of rollouts/s).
 *  - Per run: rollouts/s, agent calls/s, manager CPU per rollout (this process: manager AND the
 *    white-box loops, which live in it; black-box agents are other processes), and the overhead
 *    Σ(rollout wall − agent time) / Σ agent time, where rollout wall runs from the slot being taken
 *    to rollout.completed being durable (session, events, verifier: whatever of it is on the
 *    rollout's path) and agent time is the loop or the process from start to exit.
 *    overheadAt1024 is the white-box run at 1024. Also reported, because they are the manager's
 *    work off that path: how long opening a session took (sessionMs) and the share opened ahead
 *    while the rollout waited for a slot (aheadShare), and the cleanup after the outcome (session
 *    close, state write: cleanupMs).
 * Uses KAFKA_BROKERS / DATABASE_URL when set (a running stack), else starts its own.
 * Prints a table, then ONE JSON object as the last line of stdout.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadavg } from 'node:os';
import { join } from 'node:path';

const LATENCY_MS = Number(process.env.BENCH_RM_LATENCY_MS ?? 50);
const CAPTURE = process.env.BENCH_RM_CAPTURE ?? 'on';
const ADMIN = 'bench-rollouts-admin-token-0123456789abcdefghij';
const list = (v: string) =>
  v
    .split(',')
    .filter((x) => x.trim() !== '')
    .map(Number);
const WHITE = list(process.env.BENCH_RM_WHITE ?? '64,256,1024');
const BLACK = list(process.env.BENCH_RM_BLACK ?? '64,256');
const SANDBOX_ROUNDS = Number(process.env.BENCH_RM_SANDBOX_ROUNDS ?? 2);
type Sandbox = 'none' | 'local';
/** Rollouts per run: ROUNDS × concurrency, and for black-box runs at least BLACK_MIN_ROLLOUTS (a steady state at small N, not two bursts). */
const ROUNDS = Number(process.env.BENCH_RM_ROUNDS ?? 2);
const BLACK_MIN_ROLLOUTS = Number(process.env.BENCH_RM_BLACK_MIN_ROLLOUTS ?? 128);

// ---------------------------------------------------------------- gateway process

/** A black-box agent's workspace name (anvil-agent-<manager pid>-XXXXXX), which it puts in its first call. */
const WORKSPACE = /anvil-agent-\d+-[A-Za-z0-9]{6}/;

/** The fixed-latency backend: answers chain-add (reads the prompt bytes) after LATENCY_MS. */
async function startBackend(latencyMs: number): Promise<string> {
  const { ByteTokenizer, tinyChatFormat } = await import('@anvil/tokenizer');
  const tok = new ByteTokenizer();
  const enc = (s: string) => tok.encode(s);
  const STOP = tinyChatFormat().stopTokenIds[0];
  const move = (text: string): string => {
    const u = [...text.matchAll(/<\|im_start\|>user\n(\d+(?:\+\d+)+)<\|im_end\|>/g)].at(-1);
    if (!u) return 'ok';
    const ops = u[1].split('+').map(Number);
    const results = [...text.matchAll(/<tool_response>\n(-?\d+)\n<\/tool_response>/g)].map((m) => Number(m[1]));
    const acc = results.at(-1) ?? ops[0];
    const j = results.length;
    return j + 1 < ops.length ? `<tool_call>\n{"name": "add", "arguments": {"a": ${acc}, "b": ${ops[j + 1]}}}\n</tool_call>` : String(acc);
  };
  // When each black-box agent's first call arrived (epoch ms), by the workspace it names in it.
  const arrivals = new Map<string, number>();
  const server = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/bench/arrivals') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(Object.fromEntries(arrivals)));
      return;
    }
    if (req.method === 'GET' && req.url === '/internal/v1/replicas') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          deployment: 'bench',
          replicas: [
            {
              id: 'bench',
              healthy: true,
              routable: true,
              inFlight: 0,
              weightsVersion: null,
              prefixCacheHitRate: 0,
              model: 'bench',
              vocabSize: 272,
            },
          ],
        }),
      );
      return;
    }
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const r = JSON.parse(body) as { requestId: string; promptIds: number[]; maxTokens: number; stream?: boolean };
      const text = tok.decode(r.promptIds);
      const marker = WORKSPACE.exec(text)?.[0];
      if (marker && !arrivals.has(marker)) arrivals.set(marker, Date.now());
      const ids = [...enc(move(text)), STOP].slice(0, r.maxTokens);
      const response = {
        requestId: r.requestId,
        outputIds: ids,
        logprobs: ids.map(() => -0.5),
        versions: ids.map(() => 0),
        finishReason: 'stop',
        promptTokens: r.promptIds.length,
        cachedPromptTokens: 0,
        replica: 'bench',
      };
      setTimeout(() => {
        if (!r.stream) {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify(response));
          return;
        }
        res.writeHead(200, { 'content-type': 'application/x-ndjson' });
        res.write(JSON.stringify({ type: 'tokens', ids, logprobs: response.logprobs, versions: response.versions }) + '\n');
        res.end(JSON.stringify({ type: 'done', response }) + '\n');
      }, latencyMs);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function serveGateway(dbUrl: string, brokers: string, topicPrefix: string): Promise<void> {
  await import('reflect-metadata');
  const { Global, Module } = await import('@nestjs/common');
  const { NestFactory } = await import('@nestjs/core');
  const { FastifyAdapter } = await import('@nestjs/platform-fastify');
  const { createBus } = await import('@anvil/messaging');
  const { createLogger, ServiceMetrics } = await import('@anvil/observability');
  const { createDataSource } = await import('@anvil/persistence');
  const { DATA_SOURCE, EVENT_BUS, OpsModule } = await import('@anvil/service-kit');
  const { gatewayEnv, GatewayApiModule } = await import('@anvil/gateway');
  const backend = await startBackend(LATENCY_MS);
  console.log(`BACKEND ${backend}`);
  const ds = createDataSource({ url: dbUrl, poolSize: 20 });
  await ds.initialize();
  const bus = createBus({ kind: 'kafka', brokers: brokers.split(','), clientId: 'bench-rm-gateway', topicPrefix });
  const config = gatewayEnv.parse({
    KAFKA_BROKERS: brokers,
    DATABASE_URL: dbUrl,
    GATEWAY_ADMIN_TOKEN: ADMIN,
    INFERENCE_PROXY_URL: backend,
    LOG_LEVEL: 'error',
    MAX_STALENESS: '1000',
    GATEWAY_CAPTURE: CAPTURE,
  });
  @Global()
  @Module({
    providers: [
      { provide: EVENT_BUS, useValue: bus },
      { provide: DATA_SOURCE, useValue: ds },
    ],
    exports: [EVENT_BUS, DATA_SOURCE],
  })
  class InfraModule {}
  @Module({})
  class RootModule {}
  const logger = createLogger({ service: 'gateway', level: 'error' });
  const app = await NestFactory.create(
    {
      module: RootModule,
      imports: [
        OpsModule.forRoot({ service: 'gateway', logger, metrics: new ServiceMetrics('gateway') }),
        InfraModule,
        GatewayApiModule.forRoot({ ...config, DB_MIGRATE_ON_START: false }),
      ],
    },
    new FastifyAdapter({ bodyLimit: config.MAX_REQUEST_BYTES }),
    { logger: false },
  );
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as AddressInfo;
  console.log(`GATEWAY http://127.0.0.1:${address.port}`);
}

// ---------------------------------------------------------------- the bench

interface Row {
  agents: 'white-box' | 'black-box';
  sandbox: Sandbox | '-';
  concurrency: number;
  rollouts: number;
  calls: number;
  seconds: number;
  rolloutsPerSec: number;
  callsPerSec: number;
  managerCpuMsPerRollout: number;
  overhead: number;
  meanAgentMs: number;
  meanRolloutMs: number;
  meanSessionMs: number;
  aheadShare: number;
  meanCleanupMs: number;
  /** Black-box: from the slot to the agent's first call at the backend. */
  firstCallP50Ms: number | '-';
  firstCallP99Ms: number | '-';
  failed: number;
}

interface Outcome {
  wallMs: number;
  agentMs: number;
  numCalls: number;
  finishReason: string;
  sessionMs: number;
  sessionOpenedAhead: boolean;
  cleanupMs: number;
  /** When the outcome was heard (epoch ms): its slot was taken cleanupMs + wallMs before. */
  heardAt: number;
  workspace: string | null;
}

const round1 = (v: number) => Number(v.toFixed(1));

/** Start-to-first-call of each black-box outcome: its first call's arrival at the backend minus when it took its slot. */
function firstCalls(outcomes: Outcome[], arrivals: Record<string, number>): number[] {
  return outcomes.flatMap((o) => {
    const marker = o.workspace ? WORKSPACE.exec(o.workspace)?.[0] : undefined;
    const at = marker ? arrivals[marker] : undefined;
    // Listeners hear of a rollout after its cleanup, which followed its wall time.
    return at === undefined ? [] : [at - (o.heardAt - o.cleanupMs - o.wallMs)];
  });
}

async function main(): Promise<void> {
  if (process.argv[2] === '--serve-gateway') return serveGateway(process.argv[3], process.argv[4], process.argv[5]);
  const { createScratchDatabase } = await import('@anvil/testing');
  const { createBus } = await import('@anvil/messaging');
  const { createDataSource, runMigrations } = await import('@anvil/persistence');
  const { RolloutRuntime } = await import('@anvil/rollout-manager');
  const { percentile, printTable } = await import('./bench-kit');
  const { createLogger } = await import('@anvil/observability');
  const load0 = loadavg();
  const root = join(__dirname, '..', '..', '..');

  let brokers = process.env.KAFKA_BROKERS;
  let serverUrl = process.env.DATABASE_URL;
  let stop: (() => Promise<unknown>) | null = null;
  if (!brokers || !serverUrl) {
    process.env.ANVIL_INFRA_QUIET ??= '1';
    const { startStack, stopStack } = await import('@anvil/infra');
    const ports = { kafkaPort: Number(process.env.KAFKA_PORT ?? 39192), pgPort: Number(process.env.PG_PORT ?? 35532) };
    const s = await startStack(ports);
    brokers = s.brokers;
    serverUrl = s.url;
    stop = () => stopStack(ports);
  }
  const scratch = await createScratchDatabase(serverUrl, 'bench_rollouts');
  const ds = createDataSource({ url: scratch.url, poolSize: 32 });
  await ds.initialize();
  await runMigrations(ds);
  const topicPrefix = `bench-rm-${Date.now()}.`;
  let gw: ChildProcess | null = null;
  const rows: Row[] = [];
  let sandboxCost: {
    concurrency: number;
    none: { firstCallP50Ms: number; firstCallP99Ms: number; rolloutsPerSec: number };
    local: { firstCallP50Ms: number; firstCallP99Ms: number; rolloutsPerSec: number };
    addedStartP50Ms: number;
    rolloutsPerSecCost: number;
  }[] = [];
  try {
    const child = spawn(join(root, 'node_modules', '.bin', 'tsx'), [__filename, '--serve-gateway', scratch.url, brokers, topicPrefix], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NODE_OPTIONS: '--max-semi-space-size=64' },
    });
    gw = child;
    let out = '';
    let backendUrl = '';
    const gatewayUrl = await new Promise<string>((resolve, reject) => {
      const onData = (d: Buffer) => {
        out += d;
        backendUrl ||= /BACKEND (\S+)/.exec(out)?.[1] ?? '';
        const m = /GATEWAY (\S+)/.exec(out);
        if (m) resolve(m[1]);
      };
      child.stdout?.on('data', onData);
      child.stderr?.on('data', onData);
      child.once('exit', (c) => reject(new Error(`gateway exited ${c}: ${out}`)));
    });
    const bus = createBus({ kind: 'kafka', brokers: brokers.split(','), clientId: 'bench-rm', topicPrefix });
    // A first black-box run of each kind, not counted: the first sandbox of a process pays for its setup (tools, uid locks).
    const warmup = BLACK.length
      ? (['none', 'local'] as const).map((sandbox) => ({ agents: 'black-box' as const, n: BLACK[0], sandbox, warmup: true }))
      : [];
    const runs: { agents: 'white-box' | 'black-box'; n: number; sandbox: Sandbox | '-'; warmup?: boolean }[] = [
      ...WHITE.map((n) => ({ agents: 'white-box' as const, n, sandbox: '-' as const })),
      ...warmup,
      ...Array.from({ length: SANDBOX_ROUNDS }, (_, r) =>
        BLACK.flatMap((n) =>
          (r % 2 ? (['local', 'none'] as const) : (['none', 'local'] as const)).map((sandbox) => ({
            agents: 'black-box' as const,
            n,
            sandbox,
          })),
        ),
      ).flat(),
    ];
    const firstCallSamples = new Map<string, number[]>();
    for (const run of runs) {
      const rt = new RolloutRuntime({
        gatewayUrl,
        adminToken: ADMIN,
        bus,
        dataSource: ds,
        config: {
          concurrency: run.n,
          eta: 1000,
          groupsPerStep: 1_000_000,
          admissionPollMs: 200,
          consumerGroup: `bench.rm.${run.agents}.${run.sandbox}.${run.n}.${Date.now()}`,
          repoRoot: root,
        },
        // The none backend's warning that it is unsandboxed is known here: errors only.
        logger: createLogger({ service: 'rollout-manager', level: 'error' }),
      });
      await rt.start();
      const G = 8;
      const total = run.agents === 'black-box' ? Math.max(run.n * ROUNDS, BLACK_MIN_ROLLOUTS) : run.n * ROUNDS;
      const id = `bench-${run.agents}-${run.sandbox}-${run.n}-${Date.now()}`;
      if (run.agents === 'white-box') {
        await rt.loadBuiltin({
          id,
          env: 'chain-add',
          envConfig: { k: 3 },
          seed: run.n,
          trainCount: Math.ceil(total / G),
          evalCount: 0,
          sampling: { temperature: 1, maxTokens: 80 },
          limits: { timeoutMs: 600_000 },
        });
      } else {
        // Its first call names its workspace, so the backend can tell when each agent's first call arrived.
        const script = `for i in 1 2; do b="{\\"model\\":\\"anvil-tiny\\",\\"messages\\":[{\\"role\\":\\"user\\",\\"content\\":\\"$ANVIL_WORKSPACE $i\\"}],\\"max_tokens\\":8}"; curl -s -m 120 -X POST -H 'content-type: application/json' -d "$b" "$OPENAI_BASE_URL/chat/completions" >/dev/null; done; echo 1`;
        const tasks = Array.from({ length: Math.ceil(total / G) }, (_, i) => ({
          id: `t${i}`,
          env: null,
          messages: [{ role: 'user' as const, content: 'hi' }],
          tools: [],
          split: 'train' as const,
          difficulty: 0,
          data: { answer: 1 },
        }));
        await rt.loadTaskSet(
          {
            id,
            agent: { kind: 'black-box', name: 'curl-script', command: ['sh', '-c', script], sandbox: run.sandbox as Sandbox },
            verifier: { kind: 'function', name: 'final-answer' },
            limits: { timeoutMs: 600_000 },
          },
          tasks,
        );
      }
      const outcomes: Outcome[] = [];
      rt.onRolloutCompleted((o) => outcomes.push({ ...o, heardAt: Date.now(), workspace: o.blackBox?.workspace ?? null }));
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      await rt.submit({ taskSetId: id, groupSize: G });
      await rt.idle();
      const seconds = (performance.now() - t0) / 1000;
      const cpu = process.cpuUsage(cpu0);
      await rt.stop();
      const ok = outcomes.filter((o) => o.finishReason === 'completed');
      const agent = ok.reduce((s, o) => s + o.agentMs, 0);
      const wall = ok.reduce((s, o) => s + o.wallMs, 0);
      const calls = outcomes.reduce((s, o) => s + o.numCalls, 0);
      const first =
        run.agents === 'black-box'
          ? firstCalls(ok, (await (await fetch(`${backendUrl}/bench/arrivals`)).json()) as Record<string, number>)
          : [];
      first.sort((a, b) => a - b);
      if (run.warmup) continue;
      if (run.agents === 'black-box') {
        const key = `${run.n}:${run.sandbox}`;
        firstCallSamples.set(key, [...(firstCallSamples.get(key) ?? []), ...first]);
      }
      rows.push({
        agents: run.agents,
        sandbox: run.sandbox,
        concurrency: run.n,
        rollouts: outcomes.length,
        calls,
        seconds: Number(seconds.toFixed(2)),
        rolloutsPerSec: Number((outcomes.length / seconds).toFixed(1)),
        callsPerSec: Number((calls / seconds).toFixed(1)),
        managerCpuMsPerRollout: Number(((cpu.user + cpu.system) / 1000 / outcomes.length).toFixed(2)),
        overhead: Number(((wall - agent) / agent).toFixed(4)),
        meanAgentMs: Number((agent / Math.max(1, ok.length)).toFixed(1)),
        meanRolloutMs: Number((wall / Math.max(1, ok.length)).toFixed(1)),
        meanSessionMs: Number((ok.reduce((s, o) => s + o.sessionMs, 0) / Math.max(1, ok.length)).toFixed(1)),
        aheadShare: Number((ok.filter((o) => o.sessionOpenedAhead).length / Math.max(1, ok.length)).toFixed(3)),
        meanCleanupMs: Number((ok.reduce((s, o) => s + o.cleanupMs, 0) / Math.max(1, ok.length)).toFixed(1)),
        firstCallP50Ms: first.length ? round1(percentile(first, 50)) : '-',
        firstCallP99Ms: first.length ? round1(percentile(first, 99)) : '-',
        failed: outcomes.length - ok.length,
      });
      console.error(`${run.agents} ${run.sandbox} ×${run.n}: ${JSON.stringify(rows.at(-1))}`);
    }
    await bus.close();
    sandboxCost = BLACK.map((n) => {
      const side = (sandbox: Sandbox) => {
        const mine = rows.filter((r) => r.agents === 'black-box' && r.concurrency === n && r.sandbox === sandbox);
        const first = [...(firstCallSamples.get(`${n}:${sandbox}`) ?? [])].sort((a, b) => a - b);
        const rollouts = mine.reduce((s, r) => s + r.rollouts, 0);
        const seconds = mine.reduce((s, r) => s + r.seconds, 0);
        return {
          firstCallP50Ms: round1(percentile(first, 50)),
          firstCallP99Ms: round1(percentile(first, 99)),
          rolloutsPerSec: round1(rollouts / seconds),
        };
      };
      const none = side('none');
      const local = side('local');
      const addedStartP50Ms = round1(local.firstCallP50Ms - none.firstCallP50Ms);
      const rolloutsPerSecCost = Number((1 - local.rolloutsPerSec / none.rolloutsPerSec).toFixed(3));
      return { concurrency: n, none, local, addedStartP50Ms, rolloutsPerSecCost };
    });
  } finally {
    gw?.kill('SIGTERM');
    await ds.destroy();
    await scratch.drop().catch(() => undefined);
    await stop?.();
  }
  printTable(
    `rollout manager (backend ${LATENCY_MS} ms/call, gateway capture ${CAPTURE})`,
    rows as unknown as Record<string, string | number>[],
  );
  printTable(
    `the agents' sandbox: local against none, ${SANDBOX_ROUNDS} rounds pooled (load average ${load0[0].toFixed(1)} at the start, ${loadavg()[0].toFixed(1)} at the end)`,
    sandboxCost.map((c) => ({
      N: c.concurrency,
      'none first-call p50/p99 ms': `${c.none.firstCallP50Ms} / ${c.none.firstCallP99Ms}`,
      'local first-call p50/p99 ms': `${c.local.firstCallP50Ms} / ${c.local.firstCallP99Ms}`,
      'added p50 ms': c.addedStartP50Ms,
      'none rollouts/s': c.none.rolloutsPerSec,
      'local rollouts/s': c.local.rolloutsPerSec,
      'rollouts/s cost': `${(c.rolloutsPerSecCost * 100).toFixed(1)}%`,
    })),
  );
  const at1024 = rows.find((r) => r.agents === 'white-box' && r.concurrency === 1024);
  console.log(
    JSON.stringify({
      suite: 'rollouts',
      latencyMs: LATENCY_MS,
      capture: CAPTURE,
      rows,
      overheadAt1024: at1024?.overhead ?? null,
      sandbox: sandboxCost,
      loadAverage: { start: load0[0], end: loadavg()[0] },
      target: { overheadAt1024: 0.05, sandboxAddedStartP50Ms: 50, sandboxRolloutsPerSecCost: 0.05 },
      meetsTarget: at1024 ? at1024.overhead <= 0.05 : null,
      sandboxMeetsTarget: sandboxCost.length ? sandboxCost.every((c) => c.addedStartP50Ms < 50 && c.rolloutsPerSecCost < 0.05) : null,
    }),
  );
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
