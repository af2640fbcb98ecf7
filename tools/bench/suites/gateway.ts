/**
 * `npm run bench -- gateway`: the built gateway + inference-proxy (vLLM backend) in front of the
 * vLLM protocol fixture (libs/testing/src/backend-fixtures/vllm-fixture.ts, its own process, a fixed per-token
 * latency so the backend time is constant), on the real Kafka broker and PostgreSQL.
 *  1. Added latency over calling the backend directly: the same generation sent straight to the
 *     fixture's /v1/completions (token ids, the request the proxy sends) vs a chat completion
 *     through gateway → proxy → fixture, open loop at BENCH_GW_RATE req/s (default 1000);
 *     added = path − direct at the same percentile. Paths: gateway with capture on (records
 *     durable in Kafka before the answer), gateway with GATEWAY_CAPTURE=off, and an nginx reverse
 *     proxy (Debian package, installed with apt-get when missing, generated config in a temp
 *     dir, loopback) in front of the same fixture as the floor.
 *  2. Sustained calls/s at 256 and 1024 concurrent sessions (each its own session key), fixed
 *     concurrency, for the same paths.
 *  3. The embedded engine's decode tokens/s (createGenerator) for the tiny and ~20M configs,
 *     cold prompt vs a prefix-cache hit (run first, before any service takes the CPUs).
 *  4. The agent protocols side by side on the capture-on gateway and the same backend: chat
 *     completions, the Responses API and the Anthropic Messages API, each as JSON and as a stream,
 *     for the same one-turn request: added latency p50/p99 at BENCH_GW_LOW_RATE req/s and calls/s
 *     at 256 sessions, in BENCH_GW_PROTOCOL_ROUNDS interleaved rounds. Target: every Responses and
 *     Messages row within 1.2x of chat completions in the same mode (calls/s at least 1/1.2 of it,
 *     added latency at most 1.2x).
 * Everything (load generator, gateway, proxy, fixture, nginx, Kafka, PostgreSQL) shares this
 * machine's cores. Prints readable tables, then ONE JSON object as the last line of stdout.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGenerator, Model, setThreads, type ModelConfigInput } from '@anvil/engine';
import { repoRoot, startService, waitFor, type ServiceProcess, spawnVllmFixture } from '@anvil/testing';
import { tinyChatFormat } from '@anvil/tokenizer';
import { percentile, printTable, sleep } from './bench-kit';

process.env.KAFKA_PORT ??= '39192';
process.env.PG_PORT ??= '35532';
process.env.ANVIL_INFRA_QUIET ??= '1';

const RATE = Number(process.env.BENCH_GW_RATE ?? 1000);
const LATENCY_S = Number(process.env.BENCH_GW_LATENCY_SECONDS ?? 6);
/** A light open-loop rate as well: the added latency of an unsaturated path. */
const LOW_RATE = Number(process.env.BENCH_GW_LOW_RATE ?? 50);
const LOAD_S = Number(process.env.BENCH_GW_LOAD_SECONDS ?? 12);
const TOKEN_MS = Number(process.env.BENCH_GW_TOKEN_MS ?? 2);
const MAX_TOKENS = 8;
const CONCURRENCY = [256, 1024];
/** Sessions of the agent-protocol comparison (section 4), and its target ratio to chat completions. */
const PROTOCOL_SESSIONS = 256;
const PROTOCOL_RATIO_MAX = 1.2;
/**
 * The comparison runs in rounds, every target once per round in a rotating order, and pools each
 * target's samples over the rounds: on a machine whose other load comes and goes, each API then
 * meets the same mix of it, instead of one API drawing a busy minute.
 */
const PROTOCOL_ROUNDS = Number(process.env.BENCH_GW_PROTOCOL_ROUNDS ?? 4);
const ADMIN = 'bench-gateway-admin-token-0123456789abcdefghij';
const MODEL = 'anvil-tiny';
const NGINX_PORT = Number(process.env.BENCH_GW_NGINX_PORT ?? 39380);
const FIXTURE_PORT = Number(process.env.BENCH_GW_FIXTURE_PORT ?? 39381);

// ---------------------------------------------------------------- engine decode tokens/s

const ENGINE_CONFIGS: Array<{ name: string; cfg: ModelConfigInput }> = [
  {
    name: 'tiny',
    cfg: { vocabSize: 2048, hiddenSize: 128, intermediateSize: 384, numHiddenLayers: 4, numAttentionHeads: 4, numKeyValueHeads: 2 },
  },
  {
    name: 'small (~20M)',
    cfg: { vocabSize: 8192, hiddenSize: 512, intermediateSize: 1536, numHiddenLayers: 4, numAttentionHeads: 8, numKeyValueHeads: 4 },
  },
];

interface EngineRow {
  name: string;
  params: number;
  /** Tokens after the first / time from the first token to the last. */
  decodeTokPerSecCold: number;
  decodeTokPerSecHit: number;
  /** Output tokens / whole request time (prefill included). */
  e2eTokPerSecCold: number;
  e2eTokPerSecHit: number;
  cachedTokens: number;
}

async function engineDecode(): Promise<EngineRow[]> {
  setThreads(Number(process.env.ANVIL_BENCH_THREADS ?? 2));
  const rows: EngineRow[] = [];
  for (const c of ENGINE_CONFIGS) {
    const m = Model.create({ ...c.cfg, maxPositionEmbeddings: 2048 }, { seed: 1 });
    const gen = await createGenerator(m);
    const V = m.config.vocabSize;
    const prompt = Array.from({ length: 512 }, (_, i) => (i * 31 + 7) % V);
    await gen.generate(prompt.slice(0, 16), { maxTokens: 4, seed: 1 }); // warm-up
    const once = async (ids: number[]) => {
      const t0 = performance.now();
      let first = 0;
      let last = 0;
      let n = 0;
      const g = await gen.generate(
        ids,
        { maxTokens: 64, seed: 3, temperature: 1 },
        { onToken: () => ((last = performance.now()), first || (first = last), n++) },
      );
      return { decode: (n - 1) / ((last - first) / 1000), e2e: n / ((last - t0) / 1000), cached: g.cachedPromptTokens };
    };
    let best = { cold: { decode: 0, e2e: 0, cached: 0 }, hit: { decode: 0, e2e: 0, cached: 0 } };
    for (let rep = 0; rep < 3; rep++) {
      gen.clearPrefixCache();
      const cold = await once(prompt);
      const hit = await once([...prompt, 1, 2, 3]); // the next turn of a session: its prefix is cached
      best = {
        cold: cold.e2e > best.cold.e2e ? cold : best.cold,
        hit: hit.e2e > best.hit.e2e ? hit : best.hit,
      };
    }
    rows.push({
      name: c.name,
      params: m.numParams,
      decodeTokPerSecCold: best.cold.decode,
      decodeTokPerSecHit: best.hit.decode,
      e2eTokPerSecCold: best.cold.e2e,
      e2eTokPerSecHit: best.hit.e2e,
      cachedTokens: best.hit.cached,
    });
    await gen.close();
    m.dispose();
  }
  return rows;
}

// ---------------------------------------------------------------- processes

function nginxBinary(): string {
  const found = ['/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
  if (found) return found;
  console.error('[bench] nginx missing: apt-get install -y nginx-light');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  let r = spawnSync('apt-get', ['install', '-y', '--no-install-recommends', 'nginx-light'], { stdio: 'inherit', env });
  if (r.status !== 0) {
    spawnSync('apt-get', ['update'], { stdio: 'inherit', env });
    r = spawnSync('apt-get', ['install', '-y', '--no-install-recommends', 'nginx'], { stdio: 'inherit', env });
  }
  if (r.status !== 0 || !existsSync('/usr/sbin/nginx')) throw new Error('could not install nginx (apt-get install nginx)');
  return '/usr/sbin/nginx';
}

async function startNginx(backendPort: number): Promise<{ child: ChildProcess; url: string; dir: string }> {
  const bin = nginxBinary();
  const dir = mkdtempSync(join(tmpdir(), 'anvil-bench-nginx-'));
  const conf = join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    `daemon off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
${process.getuid?.() === 0 ? 'user root;' : ''}
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream backend { server 127.0.0.1:${backendPort}; keepalive 1024; }
  server {
    listen 127.0.0.1:${NGINX_PORT};
    keepalive_requests 1000000;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`,
  );
  const child = spawn(bin, ['-p', dir, '-c', conf], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout?.on('data', (d) => (out += d));
  child.stderr?.on('data', (d) => (out += d));
  const url = `http://127.0.0.1:${NGINX_PORT}`;
  await waitFor(
    'nginx',
    async () => {
      if (child.exitCode !== null) throw new Error(`nginx exited with ${child.exitCode}: ${out}`);
      return (await fetch(`${url}/health`)).status === 200 ? true : undefined;
    },
    20_000,
    100,
  );
  return { child, url, dir };
}

const stopChild = async (child: ChildProcess | undefined, signal: NodeJS.Signals = 'SIGTERM') => {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill(signal);
  const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(t);
};

// ---------------------------------------------------------------- load generation

interface Target {
  name: string;
  /** Request i of the run: path, headers, body. */
  req(i: number): { url: URL; headers: Record<string, string>; body: string };
}

function send(agent: Agent, r: { url: URL; headers: Record<string, string>; body: string }): Promise<number> {
  return new Promise((resolve, reject) => {
    const q = request(
      r.url,
      { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(r.body), ...r.headers } },
      (res) => {
        res.on('data', () => undefined);
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', reject);
      },
    );
    q.on('error', reject);
    q.end(r.body);
  });
}

interface Measured {
  path: string;
  mode: string;
  calls: number;
  errors: number;
  /** What the errors were: HTTP status or socket error code -> count. */
  errorKinds: Record<string, number>;
  seconds: number;
  callsPerSec: number;
  p50ms: number;
  p90ms: number;
  p99ms: number;
}

/** Counts an error by kind (status code, or the socket error's code). */
const countError = (kinds: Record<string, number>, kind: unknown) => {
  const k = typeof kind === 'number' ? String(kind) : String((kind as NodeJS.ErrnoException)?.code ?? (kind as Error)?.message ?? kind);
  kinds[k] = (kinds[k] ?? 0) + 1;
};

function summarize(
  path: string,
  mode: string,
  lat: number[],
  errors: number,
  seconds: number,
  errorKinds: Record<string, number> = {},
): Measured {
  lat.sort((a, b) => a - b);
  return {
    path,
    mode,
    calls: lat.length,
    errors,
    errorKinds,
    seconds,
    callsPerSec: lat.length / seconds,
    p50ms: percentile(lat, 50),
    p90ms: percentile(lat, 90),
    p99ms: percentile(lat, 99),
  };
}

/** Open loop: request i is due at start + i/rate; latency counts from when it was due. */
async function openLoop(t: Target, rate: number, seconds: number, sink?: number[]): Promise<Measured> {
  const agent = new Agent({ keepAlive: true, maxSockets: 2048 });
  const total = Math.round(rate * seconds);
  const lat: number[] = [];
  let errors = 0;
  const kinds: Record<string, number> = {};
  const pending: Promise<unknown>[] = [];
  const start = performance.now();
  let i = 0;
  while (i < total) {
    const now = performance.now();
    const due = Math.min(total, Math.floor(((now - start) / 1000) * rate) + 1);
    for (; i < due; i++) {
      const dueAt = start + (i / rate) * 1000;
      pending.push(
        send(agent, t.req(i)).then(
          (status) => (status === 200 ? void lat.push(performance.now() - dueAt) : (errors++, countError(kinds, status))),
          (err: unknown) => (errors++, countError(kinds, err)),
        ),
      );
    }
    await sleep(1);
  }
  await Promise.race([Promise.all(pending), sleep(120_000)]);
  const s = (performance.now() - start) / 1000;
  agent.destroy();
  if (total - lat.length - errors > 0) kinds.unfinished = total - lat.length - errors;
  sink?.push(...lat);
  return summarize(t.name, `open loop ${rate}/s`, lat, errors + (total - lat.length - errors), s, kinds);
}

/** Fixed concurrency: `n` sessions, each sending its next call when the last one is answered. */
async function closedLoop(t: Target, n: number, seconds: number, sink?: number[]): Promise<Measured> {
  const agent = new Agent({ keepAlive: true, maxSockets: n });
  const lat: number[] = [];
  let errors = 0;
  const kinds: Record<string, number> = {};
  const start = performance.now();
  const end = start + seconds * 1000;
  await Promise.all(
    Array.from({ length: n }, async (_, k) => {
      while (performance.now() < end) {
        const t0 = performance.now();
        try {
          const status = await send(agent, t.req(k));
          if (status === 200) lat.push(performance.now() - t0);
          else {
            errors++;
            countError(kinds, status);
          }
        } catch (err) {
          errors++;
          countError(kinds, err);
          await sleep(10);
        }
      }
    }),
  );
  const s = (performance.now() - start) / 1000;
  agent.destroy();
  sink?.push(...lat);
  return summarize(t.name, `${n} sessions`, lat, errors, s, kinds);
}

// ---------------------------------------------------------------- agent protocols

/** One turn asking the same question through each agent-facing API, as JSON and as a stream, each session its own key. */
function protocolTargets(gw: ServiceProcess, keys: string[], content: string): Target[] {
  const target = (name: string, path: string, body: unknown, header: (key: string) => Record<string, string>): Target => {
    const url = new URL(`${gw.baseUrl}${path}`);
    const text = JSON.stringify(body);
    return { name, req: (i) => ({ url, headers: header(keys[i % PROTOCOL_SESSIONS]), body: text }) };
  };
  const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
  const anthropic = (key: string) => ({ 'x-api-key': key, 'anthropic-version': '2023-06-01' });
  const chat = { model: MODEL, messages: [{ role: 'user', content }], max_tokens: MAX_TOKENS, temperature: 1 };
  const responses = { model: MODEL, input: content, max_output_tokens: MAX_TOKENS, temperature: 1 };
  const messages = { model: MODEL, messages: [{ role: 'user', content }], max_tokens: MAX_TOKENS, temperature: 1 };
  return [
    target('chat completions', '/v1/chat/completions', chat, bearer),
    target('responses', '/v1/responses', responses, bearer),
    target('messages', '/v1/messages', messages, anthropic),
    target('chat completions, stream', '/v1/chat/completions', { ...chat, stream: true }, bearer),
    target('responses, stream', '/v1/responses', { ...responses, stream: true }, bearer),
    target('messages, stream', '/v1/messages', { ...messages, stream: true }, anthropic),
  ];
}

interface ProtocolRow {
  api: string;
  callsPerSec: number;
  chatCallsPerSec: number;
  addedP50ms: number;
  chatAddedP50ms: number;
  addedP99ms: number;
  chatAddedP99ms: number;
  /** chat calls/s over this API's, and this API's added latency over chat's (each met when at most PROTOCOL_RATIO_MAX). */
  ratioCallsPerSec: number;
  ratioP50: number;
  ratioP99: number;
  met: boolean;
}

/**
 * Each Responses and Messages row against chat completions in the same mode. Added latency is
 * over the direct path measured in the same block; a ratio's denominator is floored at 0.1 ms
 * (an added latency at or below it is within the direct path's run-to-run noise).
 */
function compareProtocols(direct: Measured, light: Measured[], load: Measured[]): ProtocolRow[] {
  const floor = (ms: number) => Math.max(ms, 0.1);
  const rows: ProtocolRow[] = [];
  for (const [chatAt, others] of [
    [0, [1, 2]],
    [3, [4, 5]],
  ] as const) {
    const chatP50 = light[chatAt].p50ms - direct.p50ms;
    const chatP99 = light[chatAt].p99ms - direct.p99ms;
    for (const k of others) {
      const p50 = light[k].p50ms - direct.p50ms;
      const p99 = light[k].p99ms - direct.p99ms;
      const ratioCallsPerSec = load[chatAt].callsPerSec / load[k].callsPerSec;
      const ratioP50 = floor(p50) / floor(chatP50);
      const ratioP99 = floor(p99) / floor(chatP99);
      const clean = light[k].errors === 0 && load[k].errors === 0;
      rows.push({
        api: light[k].path,
        callsPerSec: load[k].callsPerSec,
        chatCallsPerSec: load[chatAt].callsPerSec,
        addedP50ms: p50,
        chatAddedP50ms: chatP50,
        addedP99ms: p99,
        chatAddedP99ms: chatP99,
        ratioCallsPerSec,
        ratioP50,
        ratioP99,
        met: clean && Math.max(ratioCallsPerSec, ratioP50, ratioP99) <= PROTOCOL_RATIO_MAX,
      });
    }
  }
  return rows;
}

// ---------------------------------------------------------------- main

async function main() {
  console.error('[bench] build (node tools/build/build.mjs)');
  const build = spawnSync(process.execPath, [join(repoRoot, 'tools', 'build', 'build.mjs')], {
    cwd: repoRoot,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  if (build.status !== 0) throw new Error('build failed');
  console.error('[bench] engine decode tokens/s (before any service runs)');
  const engine = await engineDecode();

  const { startStack, stopStack } = await import('@anvil/infra');
  let fixture: { child: ChildProcess; url: string } | undefined;
  let nginx: { child: ChildProcess; url: string; dir: string } | undefined;
  const services: ServiceProcess[] = [];
  try {
    const stack = await startStack({ fresh: true });
    fixture = await spawnVllmFixture({ port: FIXTURE_PORT, latencyMs: TOKEN_MS });
    nginx = await startNginx(FIXTURE_PORT);
    const common = { ...stack.env, KAFKA_TOPIC_PREFIX: `benchgw${Date.now()}.`, LOG_LEVEL: 'info' };
    const proxy = await startService('inference-proxy', {
      ...common,
      INFERENCE_BACKEND: 'vllm',
      INFERENCE_REPLICAS: fixture.url,
      DEPLOYMENT_NAME: 'bench-gw',
      MAX_IN_FLIGHT_PER_REPLICA: '100000',
    });
    services.push(proxy);
    const gwEnv = {
      ...common,
      GATEWAY_ADMIN_TOKEN: ADMIN,
      INFERENCE_PROXY_URL: proxy.baseUrl,
      GATEWAY_MODEL_NAME: MODEL,
      GATEWAY_MAX_CONTEXT_TOKENS: '4096',
    };
    const gwOn = await startService('gateway', { ...gwEnv, GATEWAY_CAPTURE: 'on' });
    services.push(gwOn);
    const gwOff = await startService('gateway', { ...gwEnv, GATEWAY_CAPTURE: 'off' });
    services.push(gwOff);
    const ready = (svc: ServiceProcess) =>
      waitFor(`${svc.app} /readyz`, async () => ((await fetch(`${svc.baseUrl}/readyz`)).status === 200 ? true : undefined), 120_000, 250);
    await Promise.all(services.map(ready));

    // Sessions: each its own key, opened through the admin API.
    const maxSessions = Math.max(...CONCURRENCY);
    const openSessions = async (gw: ServiceProcess, tag: string) => {
      const keys: string[] = new Array(maxSessions);
      for (let base = 0; base < maxSessions; base += 32) {
        await Promise.all(
          Array.from({ length: Math.min(32, maxSessions - base) }, async (_, j) => {
            const i = base + j;
            const res = await fetch(`${gw.baseUrl}/admin/v1/sessions`, {
              method: 'POST',
              headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
              body: JSON.stringify({ rolloutId: `bench-${tag}-${i}`, groupId: 'bench', taskId: 'bench', model: MODEL }),
            });
            if (res.status !== 201) throw new Error(`open session: ${res.status} ${await res.text()}`);
            keys[i] = ((await res.json()) as { apiKey: string }).apiKey;
          }),
        );
      }
      return keys;
    };
    const keysOn = await openSessions(gwOn, 'on');
    const keysOff = await openSessions(gwOff, 'off');

    const content = 'Benchmark question: what is 2+3? Answer briefly.';
    const chatBody = JSON.stringify({
      model: MODEL,
      messages: [{ role: 'user', content }],
      max_tokens: MAX_TOKENS,
      temperature: 1,
      seed: 1,
    });
    const fmt = tinyChatFormat();
    const promptIds = fmt.tokenizer.encode(fmt.template.render([{ role: 'user', content }], { addGenerationPrompt: true }));
    // The request the inference-proxy's vLLM backend sends (vllm-backend.ts), token ids in, SSE out.
    const completionBody = JSON.stringify({
      prompt: promptIds,
      max_tokens: MAX_TOKENS,
      temperature: 1,
      top_p: 1,
      seed: 1,
      stop_token_ids: fmt.stopTokenIds,
      logprobs: 0,
      return_tokens_as_token_ids: true,
      skip_special_tokens: false,
      include_stop_str_in_output: true,
      stream: true,
      stream_options: { include_usage: true },
    });
    const directUrl = new URL(`${fixture.url}/v1/completions`);
    const nginxUrl = new URL(`${nginx.url}/v1/completions`);
    const direct: Target = { name: 'direct (fixture)', req: () => ({ url: directUrl, headers: {}, body: completionBody }) };
    const viaNginx: Target = { name: 'nginx -> fixture', req: () => ({ url: nginxUrl, headers: {}, body: completionBody }) };
    const gateway = (gw: ServiceProcess, keys: string[], name: string): Target => ({
      name,
      req: (i) => ({
        url: new URL(`${gw.baseUrl}/v1/chat/completions`),
        headers: { authorization: `Bearer ${keys[i % keys.length]}` },
        body: chatBody,
      }),
    });
    const gwCaptureOn = gateway(gwOn, keysOn, 'gateway+proxy, capture on');
    const gwCaptureOff = gateway(gwOff, keysOff, 'gateway+proxy, capture off');
    const targets = [direct, viaNginx, gwCaptureOff, gwCaptureOn];

    // Warm-up: every session's first (admission-gated) call, connections, JIT.
    console.error('[bench] warm-up');
    for (const t of targets) await closedLoop(t, maxSessions, 3);

    console.error(`[bench] latency: open loop ${LOW_RATE} and ${RATE} req/s, ${LATENCY_S} s per path`);
    const light: Measured[] = [];
    for (const t of targets) {
      light.push(await openLoop(t, LOW_RATE, LATENCY_S));
      await sleep(500);
    }
    const latency: Measured[] = [];
    for (const t of targets) {
      latency.push(await openLoop(t, RATE, LATENCY_S));
      await sleep(1000);
    }
    console.error(`[bench] throughput: ${CONCURRENCY.join(' and ')} sessions, ${LOAD_S} s per path`);
    const load: Measured[] = [];
    for (const n of CONCURRENCY) {
      for (const t of targets) {
        load.push(await closedLoop(t, n, LOAD_S));
        await sleep(1000);
      }
    }

    // The agent protocols, last (their own direct baseline, measured in the same block).
    console.error(`[bench] agent protocols: ${LOW_RATE} req/s and ${PROTOCOL_SESSIONS} sessions per API and mode, capture on`);
    const protocols = protocolTargets(gwOn, keysOn, content);
    for (const t of protocols) await closedLoop(t, PROTOCOL_SESSIONS, 2);
    const probed = [direct, ...protocols];
    const pooled = (runs: Measured[][], samples: number[][], mode: string) =>
      probed.map((t, i) => {
        const kinds: Record<string, number> = {};
        for (const r of runs) for (const [k, v] of Object.entries(r[i].errorKinds)) kinds[k] = (kinds[k] ?? 0) + v;
        const sum = (f: (m: Measured) => number) => runs.reduce((a, r) => a + f(r[i]), 0);
        return summarize(
          t.name,
          mode,
          samples[i],
          sum((m) => m.errors),
          sum((m) => m.seconds),
          kinds,
        );
      });
    const lightRuns: Measured[][] = [];
    const loadRuns: Measured[][] = [];
    const lightSamples: number[][] = probed.map(() => []);
    const loadSamples: number[][] = probed.map(() => []);
    for (let round = 0; round < PROTOCOL_ROUNDS; round++) {
      const light: Measured[] = new Array(probed.length);
      const load: Measured[] = new Array(probed.length);
      for (let j = 0; j < probed.length; j++) {
        const i = (j + round) % probed.length;
        light[i] = await openLoop(probed[i], LOW_RATE, LATENCY_S / 2, lightSamples[i]);
        if (i > 0) load[i] = await closedLoop(probed[i], PROTOCOL_SESSIONS, LOAD_S / 2, loadSamples[i]);
        await sleep(300);
      }
      load[0] = light[0]; // the direct path's throughput is not compared
      lightRuns.push(light);
      loadRuns.push(load);
    }
    const [protoDirect, ...protoLight] = pooled(lightRuns, lightSamples, `open loop ${LOW_RATE}/s, ${PROTOCOL_ROUNDS} rounds`);
    const protoLoad = pooled(loadRuns, loadSamples, `${PROTOCOL_SESSIONS} sessions, ${PROTOCOL_ROUNDS} rounds`).slice(1);
    const protoRows = compareProtocols(protoDirect, protoLight, protoLoad);

    const addedOver = (base: Measured) => (m: Measured) => ({ p50: m.p50ms - base.p50ms, p99: m.p99ms - base.p99ms });
    const added = addedOver(latency[0]);
    const addedLight = addedOver(light[0]);
    const kindsOf = (m: Measured) =>
      Object.entries(m.errorKinds)
        .map(([k, v]) => `${k}×${v}`)
        .join(' ');
    const fmtRow = (m: Measured) => ({
      path: m.path,
      load: m.mode,
      calls: m.calls,
      errors: m.errors,
      'calls/s': Math.round(m.callsPerSec),
      'p50 ms': m.p50ms,
      'p90 ms': m.p90ms,
      'p99 ms': m.p99ms,
      'error kinds': kindsOf(m),
    });
    // What the services said about failed calls (first few error/warn lines each), on stderr.
    if ([...light, ...latency, ...load, ...protoLight, ...protoLoad].some((m) => m.errors > 0)) {
      for (const svc of services) {
        const lines = svc
          .output()
          .split('\n')
          .filter((l) => /"level":"(error|warn)"/.test(l));
        if (lines.length)
          console.error(
            `[bench] ${svc.app} (port ${svc.port}): ${lines.length} error/warn lines, first ones:\n${lines
              .slice(0, 3)
              .map((l) => l.slice(0, 600))
              .join('\n')}`,
          );
      }
    }
    console.log(
      `\nBackend: vLLM protocol fixture, ${MAX_TOKENS} tokens × ${TOKEN_MS} ms/token, SSE; one ${MODEL} chat turn through the gateway. All processes share this machine's cores.`,
    );
    printTable(
      `Latency, open loop at ${LOW_RATE} and ${RATE} req/s (latency from each request's due time)`,
      [...light, ...latency].map(fmtRow),
    );
    printTable('Added over calling the fixture directly (same rate, same percentile)', [
      ...light.slice(1).map((m) => ({
        path: m.path,
        rate: LOW_RATE,
        'added p50 ms': addedLight(m).p50,
        'added p99 ms': addedLight(m).p99,
        'achieved calls/s': Math.round(m.callsPerSec),
        errors: m.errors,
      })),
      ...latency.slice(1).map((m) => ({
        path: m.path,
        rate: RATE,
        'added p50 ms': added(m).p50,
        'added p99 ms': added(m).p99,
        'achieved calls/s': Math.round(m.callsPerSec),
        errors: m.errors,
      })),
    ]);
    printTable('Sustained throughput, fixed concurrency (each session its own key)', load.map(fmtRow));
    printTable(
      `Agent protocols on the capture-on gateway: added latency at ${LOW_RATE} req/s (over direct, p50 ${protoDirect.p50ms.toFixed(2)} / p99 ${protoDirect.p99ms.toFixed(2)} ms), calls/s at ${PROTOCOL_SESSIONS} sessions`,
      protocols.map((t, i) => ({
        api: t.name,
        'added p50 ms': protoLight[i].p50ms - protoDirect.p50ms,
        'added p99 ms': protoLight[i].p99ms - protoDirect.p99ms,
        'calls/s': Math.round(protoLoad[i].callsPerSec),
        errors: protoLight[i].errors + protoLoad[i].errors,
        'error kinds': [kindsOf(protoLight[i]), kindsOf(protoLoad[i])].filter(Boolean).join(' '),
      })),
    );
    printTable(
      'Embedded engine (createGenerator, 2 threads): 512-token prompt, 64 new tokens, cold vs prefix-cache hit',
      engine.map((r) => ({
        model: r.name,
        params: `${(r.params / 1e6).toFixed(1)}M`,
        'decode tok/s cold': Math.round(r.decodeTokPerSecCold),
        'decode tok/s hit': Math.round(r.decodeTokPerSecHit),
        'e2e tok/s cold': Math.round(r.e2eTokPerSecCold),
        'e2e tok/s hit': Math.round(r.e2eTokPerSecHit),
        'hit tokens': r.cachedTokens,
      })),
    );

    const on = latency[3];
    const off = latency[2];
    const ng = latency[1];
    const onAdded = added(on);
    const offAdded = added(off);
    const ngAdded = added(ng);
    const achieved = on.callsPerSec >= RATE * 0.95 && on.errors === 0;
    const captureTargetMet = achieved && onAdded.p99 <= 5;
    // An nginx hop at or below 0 is within the run-to-run noise of the direct path: the ratio is
    // then taken against 0.1 ms (a floor, so the target means "within 0.2 ms" there).
    const floorMs = 0.1;
    const ratioP50 = offAdded.p50 / Math.max(ngAdded.p50, floorMs);
    const ratioP99 = offAdded.p99 / Math.max(ngAdded.p99, floorMs);
    const hopTargetMet = ratioP50 <= 2 && ratioP99 <= 2;
    const lightOn = addedLight(light[3]);
    const lightOff = addedLight(light[2]);
    const lightNg = addedLight(light[1]);
    printTable('Targets', [
      {
        target: `capture on: p99 added ≤ 5 ms at ${RATE} req/s`,
        measured: `${onAdded.p99.toFixed(2)} ms at ${Math.round(on.callsPerSec)} calls/s (${on.errors} errors)`,
        result: captureTargetMet ? 'met' : 'short',
      },
      {
        target: 'capture off: gateway+proxy hop ≤ 2× nginx hop',
        measured: `p50 ${offAdded.p50.toFixed(2)} vs ${ngAdded.p50.toFixed(2)} ms (${ratioP50.toFixed(1)}×), p99 ${offAdded.p99.toFixed(2)} vs ${ngAdded.p99.toFixed(2)} ms (${ratioP99.toFixed(1)}×; nginx hop floored at ${floorMs} ms)`,
        result: hopTargetMet ? 'met' : 'short',
      },
      ...protoRows.map((r) => ({
        target: `${r.api}: within ${PROTOCOL_RATIO_MAX}x of chat completions`,
        measured: `calls/s ${Math.round(r.callsPerSec)} vs ${Math.round(r.chatCallsPerSec)} (${r.ratioCallsPerSec.toFixed(2)}x), added p50 ${r.addedP50ms.toFixed(2)} vs ${r.chatAddedP50ms.toFixed(2)} ms (${r.ratioP50.toFixed(2)}x), p99 ${r.addedP99ms.toFixed(2)} vs ${r.chatAddedP99ms.toFixed(2)} ms (${r.ratioP99.toFixed(2)}x)`,
        result: r.met ? 'met' : 'short',
      })),
      {
        target: `(context) added at ${LOW_RATE} req/s, p50 / p99`,
        measured: `capture on ${lightOn.p50.toFixed(2)} / ${lightOn.p99.toFixed(2)} ms, off ${lightOff.p50.toFixed(2)} / ${lightOff.p99.toFixed(2)} ms, nginx ${lightNg.p50.toFixed(2)} / ${lightNg.p99.toFixed(2)} ms`,
        result: '',
      },
    ]);
    console.log(
      JSON.stringify({
        suite: 'gateway',
        backend: { tokenLatencyMs: TOKEN_MS, maxTokens: MAX_TOKENS },
        rate: RATE,
        lowRate: LOW_RATE,
        latency,
        latencyLowRate: light,
        addedLowRate: { captureOn: lightOn, captureOff: lightOff, nginx: lightNg },
        added: { captureOn: onAdded, captureOff: offAdded, nginx: ngAdded },
        throughput: load,
        protocols: { direct: protoDirect, latencyLowRate: protoLight, throughput: protoLoad, sessions: PROTOCOL_SESSIONS, rows: protoRows },
        engine,
        targets: {
          captureOnP99AddedMsMax: 5,
          captureOnMet: captureTargetMet,
          hopRatioMax: 2,
          hopRatioP50: ratioP50,
          hopRatioP99: ratioP99,
          hopMet: hopTargetMet,
          protocolRatioMax: PROTOCOL_RATIO_MAX,
          protocolsMet: protoRows.every((r) => r.met),
        },
      }),
    );
  } finally {
    for (const s of services.reverse()) await s.stop('SIGTERM').catch(() => undefined);
    await stopChild(nginx?.child, 'SIGQUIT').catch(() => undefined);
    if (nginx) rmSync(nginx.dir, { recursive: true, force: true });
    await stopChild(fixture?.child).catch(() => undefined);
    await stopStack();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
