/**
 * `npm run bench -- sandbox`: what the local sandbox costs a program's start, against the none
 * backend, on the same trivial command — curl (from sh) making one chat call through the session relay to a
 * local HTTP server standing in for the gateway.
 *  - start-to-first-request: from the call to run() to the request's arrival at the server (the
 *    host's preparation, the namespaces, the supervisor, curl's own start, both relays), p50/p99
 *    over BENCH_SANDBOX_RUNS runs per backend, one at a time, the backends interleaved so that
 *    both see the same machine;
 *  - run wall: from run() to its result (cleanup and the no-survivor check included);
 *  - runs/s: BENCH_SANDBOX_RUNS runs per backend, BENCH_SANDBOX_CONCURRENCY at a time.
 * Target (issue 31): local adds under 50 ms p50 to a start.
 * Prints a table, then ONE JSON object as the last line of stdout.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSandbox, type SandboxBackend, type SandboxLogger } from '@anvil/sandbox';
import { percentile, printTable } from './bench-kit';

const RUNS = Number(process.env.BENCH_SANDBOX_RUNS ?? 200);
const CONCURRENCY = Number(process.env.BENCH_SANDBOX_CONCURRENCY ?? 8);
const WARMUP = 10;
const TARGET_MS = 50;
const quiet: SandboxLogger = { info: () => undefined, warn: () => undefined };

/** A stand-in gateway: records when each session's first request arrived, answers a tiny completion. */
async function startGateway() {
  const arrivals = new Map<string, number>();
  const server = createServer((req, res) => {
    const key = /^\/sessions\/([^/]+)\//.exec(req.url ?? '')?.[1];
    if (key && !arrivals.has(key)) arrivals.set(key, performance.now());
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"choices":[{"message":{"content":"ok"}}]}'));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  let n = 0;
  return {
    arrivals,
    session: () => {
      const apiKey = `anvil-sess_bench${String(n++).padStart(12, '0')}.${'k'.repeat(43)}`;
      return { apiKey, baseUrl: `${origin}/sessions/${apiKey}/v1` };
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

type Gateway = Awaited<ReturnType<typeof startGateway>>;

async function once(backend: SandboxBackend, gateway: Gateway): Promise<{ firstRequestMs: number; wallMs: number }> {
  const ws = mkdtempSync(join(tmpdir(), 'anvil-bench-sandbox-'));
  const session = gateway.session();
  const t0 = performance.now();
  try {
    const r = await backend.run({
      label: 'bench',
      workspace: ws,
      session,
      limits: { wallMs: 30_000 },
      // sh only expands the URL, whose port differs per backend (a local sandbox always sees 8080).
      argv: ['sh', '-c', 'exec curl -sf -o /dev/null -H "content-type: application/json" -d "{}" "$OPENAI_BASE_URL/chat/completions"'],
    });
    const arrived = gateway.arrivals.get(session.apiKey);
    if (r.reason !== 'exit' || r.exitCode !== 0 || arrived === undefined)
      throw new Error(`${backend.kind}: the bench command failed: ${r.reason} ${r.exitCode} ${r.detail} ${r.stderr.slice(-500)}`);
    return { firstRequestMs: arrived - t0, wallMs: performance.now() - t0 };
  } finally {
    rmSync(ws, { recursive: true, force: true });
  }
}

async function throughput(backend: SandboxBackend, gateway: Gateway): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next++ < RUNS) await once(backend, gateway);
    }),
  );
  return RUNS / ((performance.now() - t0) / 1000);
}

async function main(): Promise<void> {
  const gateway = await startGateway();
  const backends = { none: await createSandbox('none', { logger: quiet }), local: await createSandbox('local', { logger: quiet }) };
  const samples = { none: { first: [] as number[], wall: [] as number[] }, local: { first: [] as number[], wall: [] as number[] } };
  for (let i = 0; i < WARMUP; i++) for (const b of Object.values(backends)) await once(b, gateway);
  for (let i = 0; i < RUNS; i++) {
    for (const kind of i % 2 ? (['local', 'none'] as const) : (['none', 'local'] as const)) {
      const s = await once(backends[kind], gateway);
      samples[kind].first.push(s.firstRequestMs);
      samples[kind].wall.push(s.wallMs);
    }
  }
  const rate = { none: await throughput(backends.none, gateway), local: await throughput(backends.local, gateway) };
  await gateway.close();
  const stats = (kind: 'none' | 'local') => {
    const first = [...samples[kind].first].sort((a, b) => a - b);
    const wall = [...samples[kind].wall].sort((a, b) => a - b);
    return {
      firstRequestP50Ms: percentile(first, 50),
      firstRequestP99Ms: percentile(first, 99),
      wallP50Ms: percentile(wall, 50),
      wallP99Ms: percentile(wall, 99),
      runsPerSec: rate[kind],
    };
  };
  const none = stats('none');
  const local = stats('local');
  const addedP50Ms = local.firstRequestP50Ms - none.firstRequestP50Ms;
  printTable(`sandbox: curl, one chat call through the session relay (${RUNS} runs each; runs/s at ${CONCURRENCY} at a time)`, [
    { backend: 'none', ...none },
    { backend: 'local', ...local },
  ]);
  console.log(
    `\nlocal adds ${addedP50Ms.toFixed(1)} ms p50 to the start (target < ${TARGET_MS} ms); runs/s ${((local.runsPerSec / none.runsPerSec) * 100).toFixed(0)}% of none's`,
  );
  console.log(
    JSON.stringify({
      suite: 'sandbox',
      runs: RUNS,
      concurrency: CONCURRENCY,
      none,
      local,
      addedStartP50Ms: addedP50Ms,
      runsPerSecRatio: local.runsPerSec / none.runsPerSec,
      targetMs: TARGET_MS,
      withinTarget: addedP50Ms < TARGET_MS,
    }),
  );
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
