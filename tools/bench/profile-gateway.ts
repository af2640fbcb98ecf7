/**
 * Where the gateway path spends its CPU: starts the built gateway (capture on or off) and
 * inference-proxy in front of the vLLM protocol fixture, on the real broker and server, with
 * `--cpu-prof` on both services; drives `--sessions` sessions in a closed loop for `--seconds`;
 * then prints each service's top self-time functions and packages. A development tool beside
 * the gateway bench (`npm run bench -- gateway` has the numbers; this says why).
 *   npx tsx tools/bench/profile-gateway.ts [--capture on|off] [--sessions 256] [--seconds 10] [--top 25] [--token-ms 2] [--profile on|off]
 *     [--api chat|responses|messages] [--stream on|off]   (the agent-facing API the load uses; default chat, JSON)
 *     [--fixture-port 39391]   (KAFKA_PORT / PG_PORT pick the infrastructure's ports: default 39192 / 35532;
 *     PROFILE_NODE_ARGS adds node flags to both services, e.g. "--max-semi-space-size=16" to compare GC settings)
 */
import { spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startService, waitFor, type ServiceProcess, spawnVllmFixture } from '@anvil/testing';

const { values: args } = parseArgs({
  options: {
    capture: { type: 'string', default: 'on' },
    sessions: { type: 'string', default: '256' },
    seconds: { type: 'string', default: '10' },
    top: { type: 'string', default: '25' },
    profile: { type: 'string', default: 'on' },
    'token-ms': { type: 'string', default: '2' },
    'fixture-port': { type: 'string', default: '39391' },
    api: { type: 'string', default: 'chat' },
    stream: { type: 'string', default: 'off' },
  },
});
process.env.KAFKA_PORT ??= '39192';
process.env.PG_PORT ??= '35532';
process.env.ANVIL_INFRA_QUIET ??= '1';
const ADMIN = 'profile-gateway-admin-token-0123456789abcdef';
const MODEL = 'anvil-tiny';

function post(agent: Agent, url: URL, headers: Record<string, string>, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const q = request(
      url,
      { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers } },
      (res) => {
        res.on('data', () => undefined);
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    q.on('error', reject);
    q.end(body);
  });
}

/** utime + stime of processes (and their threads), in ms. */
function cpuMs(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(f[11]) + Number(f[12]);
    } catch {
      // gone
    }
  }
  return (ticks * 1000) / 100; // USER_HZ = 100
}

const pgrep = (pattern: string): number[] => {
  const r = spawnSync('pgrep', ['-f', pattern], { encoding: 'utf8' });
  return r.stdout
    .split('\n')
    .filter(Boolean)
    .map(Number)
    .filter((p) => p !== process.pid);
};

/** The pids and every process below them (PostgreSQL's backends, tsx's node child). */
function withDescendants(roots: number[]): number[] {
  const parent = new Map<number, number>();
  for (const d of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      parent.set(Number(d), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone
    }
  }
  const out = new Set(roots.filter(Boolean));
  for (let grew = true; grew;) {
    grew = false;
    for (const [pid, ppid] of parent) {
      if (out.has(ppid) && !out.has(pid)) {
        out.add(pid);
        grew = true;
      }
    }
  }
  return [...out];
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

/** Self time by function and by package (node_modules/<pkg>, our libs/apps, node internals). */
function summarize(file: string, top: number, window: [number, number]): void {
  const prof = JSON.parse(readFileSync(file, 'utf8')) as {
    nodes: ProfileNode[];
    samples: number[];
    timeDeltas: number[];
    startTime: number;
  };
  const self = new Map<number, number>();
  // Profile timestamps are CLOCK_MONOTONIC microseconds, as process.hrtime is: keep the load phase only.
  let t = prof.startTime;
  prof.samples.forEach((id, i) => {
    t += prof.timeDeltas[i] ?? 0;
    if (t >= window[0] && t <= window[1]) self.set(id, (self.get(id) ?? 0) + (prof.timeDeltas[i] ?? 0));
  });
  const byFn = new Map<string, number>();
  const byPkg = new Map<string, number>();
  let total = 0;
  for (const n of prof.nodes) {
    const t = self.get(n.id) ?? 0;
    if (!t) continue;
    total += t;
    const url = n.callFrame.url.replace(/^file:\/\//, '');
    const pkg =
      /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1] ??
      /\/dist\/((?:apps|libs)\/[^/]+)/.exec(url)?.[1] ??
      (url.startsWith('node:') ? 'node:' + url.slice(5).split('/')[0] : url ? 'other' : `(${n.callFrame.functionName || 'native'})`);
    const fn = `${n.callFrame.functionName || '(anon)'} ${url.split('/').slice(-2).join('/')}:${n.callFrame.lineNumber + 1}`;
    byFn.set(fn, (byFn.get(fn) ?? 0) + t);
    byPkg.set(pkg, (byPkg.get(pkg) ?? 0) + t);
  }
  const show = (m: Map<string, number>, k: number) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, k)
      .map(([name, t]) => `  ${((100 * t) / total).toFixed(1).padStart(5)}%  ${name}`)
      .join('\n');
  console.log(
    `\n== ${file} (${(total / 1e6).toFixed(1)} s sampled in the load phase)\n-- by package\n${show(byPkg, 20)}\n-- by function\n${show(byFn, top)}`,
  );
}

async function main() {
  const { startStack, stopStack } = await import('@anvil/infra');
  const profDir = mkdtempSync(join(tmpdir(), 'anvil-gw-prof-'));
  const services: ServiceProcess[] = [];
  let fixture: { child: ChildProcess; url: string } | undefined;
  const pids: Record<string, number | undefined> = {};
  const loadWindow: [number, number] = [0, 0];
  try {
    const stack = await startStack({ fresh: true });
    fixture = await spawnVllmFixture({ port: Number(args['fixture-port']), latencyMs: Number(args['token-ms']) });
    const nodeArgs = [
      ...(args.profile === 'on' ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : []),
      ...(process.env.PROFILE_NODE_ARGS ?? '').split(' ').filter(Boolean),
    ];
    const common = {
      ...stack.env,
      KAFKA_TOPIC_PREFIX: `profgw${Date.now()}.`,
      LOG_LEVEL: 'info',
      ...(process.env.OTEL_SDK_DISABLED ? { OTEL_SDK_DISABLED: process.env.OTEL_SDK_DISABLED } : {}),
    };
    const proxy = await startService(
      'inference-proxy',
      {
        ...common,
        INFERENCE_BACKEND: 'vllm',
        INFERENCE_REPLICAS: fixture.url,
        DEPLOYMENT_NAME: 'prof-gw',
        MAX_IN_FLIGHT_PER_REPLICA: '100000',
      },
      60_000,
      nodeArgs,
    );
    services.push(proxy);
    const gw = await startService(
      'gateway',
      {
        ...common,
        GATEWAY_ADMIN_TOKEN: ADMIN,
        INFERENCE_PROXY_URL: proxy.baseUrl,
        GATEWAY_MODEL_NAME: MODEL,
        GATEWAY_MAX_CONTEXT_TOKENS: '4096',
        GATEWAY_CAPTURE: args.capture,
      },
      60_000,
      nodeArgs,
    );
    services.push(gw);
    for (const svc of services) pids[svc.app] = svc.child.pid;
    for (const s of services)
      await waitFor(`${s.app} ready`, async () => ((await fetch(`${s.baseUrl}/readyz`)).status === 200 ? true : undefined), 120_000, 250);
    const n = Number(args.sessions);
    const keys: string[] = [];
    for (let i = 0; i < n; i++) {
      const res = await fetch(`${gw.baseUrl}/admin/v1/sessions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ rolloutId: `prof-${i}`, groupId: 'prof', taskId: 'prof', model: MODEL }),
      });
      keys.push(((await res.json()) as { apiKey: string }).apiKey);
    }
    const question = 'Benchmark question: what is 2+3? Answer briefly.';
    const stream = args.stream === 'on' ? { stream: true } : {};
    const apis: Record<string, { path: string; body: unknown; auth: (key: string) => Record<string, string> }> = {
      chat: {
        path: '/v1/chat/completions',
        body: { model: MODEL, messages: [{ role: 'user', content: question }], max_tokens: 8, temperature: 1, seed: 1 },
        auth: (key) => ({ authorization: `Bearer ${key}` }),
      },
      responses: {
        path: '/v1/responses',
        body: { model: MODEL, input: question, max_output_tokens: 8, temperature: 1 },
        auth: (key) => ({ authorization: `Bearer ${key}` }),
      },
      messages: {
        path: '/v1/messages',
        body: { model: MODEL, messages: [{ role: 'user', content: question }], max_tokens: 8, temperature: 1 },
        auth: (key) => ({ 'x-api-key': key, 'anthropic-version': '2023-06-01' }),
      },
    };
    const api = apis[args.api];
    if (!api) throw new Error(`--api ${args.api}: one of ${Object.keys(apis).join(', ')}`);
    const body = JSON.stringify({ ...(api.body as object), ...stream });
    const url = new URL(`${gw.baseUrl}${api.path}`);
    const agent = new Agent({ keepAlive: true, maxSockets: n });
    const run = async (seconds: number) => {
      const end = performance.now() + seconds * 1000;
      let ok = 0;
      let bad = 0;
      await Promise.all(
        keys.map(async (k) => {
          while (performance.now() < end) {
            if ((await post(agent, url, api.auth(k), body)) === 200) ok++;
            else bad++;
          }
        }),
      );
      return { ok, bad };
    };
    await run(3); // warm-up (every session's first, admission-gated call; JIT)
    // Unloaded latency of each layer, one call at a time: where the added milliseconds are.
    const { tinyChatFormat } = await import('@anvil/tokenizer');
    const fmt = tinyChatFormat();
    const promptIds = fmt.tokenizer.encode(
      fmt.template.render([{ role: 'user', content: 'Benchmark question: what is 2+3? Answer briefly.' }], { addGenerationPrompt: true }),
    );
    const layers: Array<[string, URL, Record<string, string>, string]> = [
      [
        'fixture (SSE, as the proxy asks)',
        new URL(`${fixture.url}/v1/completions`),
        {},
        JSON.stringify({
          prompt: promptIds,
          max_tokens: 8,
          temperature: 1,
          seed: 1,
          logprobs: 0,
          return_tokens_as_token_ids: true,
          stream: true,
          stream_options: { include_usage: true },
        }),
      ],
      [
        'proxy /internal/v1/generate (JSON)',
        new URL(`${proxy.baseUrl}/internal/v1/generate`),
        {},
        JSON.stringify({ requestId: 'probe', sessionId: 'probe', promptIds, maxTokens: 8, temperature: 1, seed: 1 }),
      ],
      [`gateway ${args.api}${args.stream === 'on' ? ' (stream)' : ' (JSON)'}`, url, api.auth(keys[0]), body],
    ];
    const one = new Agent({ keepAlive: true, maxSockets: 1 });
    for (const [name, u, h, b] of layers) {
      const lat: number[] = [];
      for (let i = 0; i < 200; i++) {
        const t = performance.now();
        await post(one, u, h, b);
        lat.push(performance.now() - t);
      }
      lat.sort((a, b2) => a - b2);
      console.log(`unloaded ${name}: p50 ${lat[100].toFixed(2)} ms, p90 ${lat[180].toFixed(2)} ms`);
    }
    one.destroy();
    const groups: Record<string, () => number[]> = {
      gateway: () => [gw.child.pid ?? 0],
      'inference-proxy': () => [proxy.child.pid ?? 0],
      'fixture (tsx + node)': () => withDescendants([fixture?.child.pid ?? 0]),
      // This run's own broker and server (another stack may be running on other ports).
      kafka: () => withDescendants(pgrep(`broker-${process.env.KAFKA_PORT}/server.properties`)),
      postgres: () => withDescendants(pgrep(`pg/${process.env.PG_PORT}/data`)),
    };
    const before = Object.fromEntries(Object.entries(groups).map(([k, f]) => [k, cpuMs(f())]));
    const outputBefore = Object.fromEntries(services.map((svc) => [svc.app, svc.output().length]));
    const selfBefore = process.cpuUsage();
    const t0 = performance.now();
    loadWindow[0] = Number(process.hrtime.bigint() / 1000n);
    const r = await run(Number(args.seconds));
    loadWindow[1] = Number(process.hrtime.bigint() / 1000n);
    const s = (performance.now() - t0) / 1000;
    const self = process.cpuUsage(selfBefore);
    console.log(
      `capture ${args.capture}, ${args.api}${args.stream === 'on' ? ' stream' : ''}, ${n} sessions: ${(r.ok / s).toFixed(0)} calls/s, ${r.bad} errors`,
    );
    for (const svc of services) {
      const lines = svc.output().slice(outputBefore[svc.app]).split('\n').filter(Boolean);
      const msgs = new Map<string, number>();
      for (const l of lines)
        msgs.set(/"msg":"([^"]*)"/.exec(l)?.[1] ?? l.slice(0, 80), (msgs.get(/"msg":"([^"]*)"/.exec(l)?.[1] ?? l.slice(0, 80)) ?? 0) + 1);
      if (lines.length)
        console.log(
          `${svc.app} logged ${lines.length} lines in the load phase: ${[...msgs]
            .slice(0, 5)
            .map(([m, c]) => `${m} ×${c}`)
            .join('; ')}`,
        );
    }
    console.log('CPU per answered call (ms), load phase only:');
    let total = 0;
    for (const [k, f] of Object.entries(groups)) {
      const ms = (cpuMs(f()) - before[k]) / r.ok;
      total += ms;
      console.log(`  ${k.padEnd(22)} ${ms.toFixed(3)}`);
    }
    const loadMs = (self.user + self.system) / 1000 / r.ok;
    console.log(`  ${'load generator'.padEnd(22)} ${loadMs.toFixed(3)}\n  ${'total'.padEnd(22)} ${(total + loadMs).toFixed(3)}`);
    agent.destroy();
  } finally {
    for (const s of services.reverse()) await s.stop('SIGTERM').catch(() => undefined);
    fixture?.child.kill('SIGTERM');
    await stopStack();
  }
  if (args.profile === 'on') {
    for (const f of readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile'))) {
      const app = Object.entries(pids).find(([, pid]) => f.includes(`.${pid}.`))?.[0] ?? 'unknown';
      console.log(`\n#### ${app}`);
      summarize(join(profDir, f), Number(args.top), loadWindow);
    }
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
