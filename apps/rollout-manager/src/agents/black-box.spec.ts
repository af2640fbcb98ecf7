import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PLACEHOLDER_KEY, SandboxUnavailableError } from '@anvil/sandbox';
import { chainAddTask } from '../environments/chain-add';
import { Sandboxes } from '../sandbox/sandboxes';
import { agentSpecSchema } from '../tasks/task-set';
import { AgentSpecError, checkAgentEnv, runBlackBox } from './black-box';
import { blackBoxLaunch, type BlackBoxSpec } from './black-box-launch';

// Real sandboxes (bubblewrap, and the none backend) against a real HTTP server standing in for the
// gateway; the local ones on a uid range of this file's own, checked empty after every test.
const UID_BASE = 1_800_200_000;
const UID_COUNT = 32;
const quiet = { info: () => undefined, warn: () => undefined };
const sandboxes = new Sandboxes(quiet, { uidBase: UID_BASE, uidCount: UID_COUNT });
const task = chainAddTask([12, 7, 30]);
const made: string[] = [];
const dir = () => {
  const d = mkdtempSync(join(tmpdir(), 'rm-black-box-'));
  chmodSync(d, 0o755);
  made.push(d);
  return d;
};

let server: Server;
let origin = '';
const seen: { url: string; auth: string }[] = [];
const session = (key = 'anvil-sess_unit.secret') => ({ baseUrl: `${origin}/sessions/${key}/v1`, apiKey: key });

const spec = (command: string[], extra: Record<string, unknown> = {}): BlackBoxSpec => {
  const s = agentSpecSchema.parse({ kind: 'black-box', name: 'sh', command, ...extra });
  if (s.kind !== 'black-box') throw new Error('unreachable');
  return s;
};
const run = (s: BlackBoxSpec, opts: { timeoutMs?: number; root?: string; key?: string; t?: Parameters<typeof blackBoxLaunch>[1] } = {}) =>
  runBlackBox(blackBoxLaunch(s, opts.t ?? {}, opts.root ?? process.cwd()), task, session(opts.key), () => sandboxes.get(s.sandbox), {
    timeoutMs: opts.timeoutMs ?? 20_000,
    label: 'unit',
  });

/** Live processes of this file's sandbox uids. */
function sandboxProcesses(): string[] {
  const out: string[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const status = readFileSync(`/proc/${e}/status`, 'utf8');
      const uid = Number(/\nUid:\t(\d+)/.exec(status)?.[1]);
      if (uid >= UID_BASE && uid < UID_BASE + UID_COUNT && !/\nState:\tZ/.test(status)) out.push(`${e} ${status.split('\n')[0]}`);
    } catch {
      /* exited meanwhile */
    }
  }
  return out;
}

beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push({ url: req.url ?? '', auth: String(req.headers.authorization ?? '') });
    req
      .resume()
      .on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"choices":[{"message":{"content":"ok"}}]}'));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
  for (const d of made) rmSync(d, { recursive: true, force: true });
});
afterEach(() => expect(sandboxProcesses()).toEqual([]));

const CALL = `curl -sf -H 'content-type: application/json' -H "authorization: Bearer $OPENAI_API_KEY" -d '{}' "$OPENAI_BASE_URL/chat/completions"`;

describe('black-box agents in a local sandbox', () => {
  it('get the task on stdin, their session through the relay (a placeholder key inside), and nothing else of the manager', async () => {
    process.env.ANVIL_TEST_SECRET_TOKEN = 'must-not-leak';
    const r = await run(spec(['sh', '-c', `id -u; hostname; env | sort; echo ---; cat; echo; ${CALL}`]), { key: 'anvil-sess_unit.one' });
    delete process.env.ANVIL_TEST_SECRET_TOKEN;
    expect(r.sandbox, r.stderr).toMatchObject({ backend: 'local', reason: 'exit' });
    const [head, rest] = r.stdout.split('---\n');
    const [uid, host, ...envLines] = head.trim().split('\n');
    expect([uid, host]).toEqual(['1000', 'anvil-sandbox']);
    const env = Object.fromEntries(envLines.map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
    expect(env).toMatchObject({
      OPENAI_BASE_URL: 'http://127.0.0.1:8080/v1',
      OPENAI_API_KEY: PLACEHOLDER_KEY,
      ANVIL_TASK_FILE: `${r.workspace}/task.json`,
      ANVIL_ANSWER_FILE: `${r.workspace}/answer`,
      ANVIL_WORKSPACE: r.workspace,
    });
    expect(head).not.toContain('must-not-leak');
    expect(head).not.toContain('anvil-sess_unit.one');
    expect(Object.keys(env).filter((n) => /TOKEN|SECRET|DATABASE|KAFKA/.test(n))).toEqual([]);
    expect(JSON.parse(rest.split('\n')[0])).toMatchObject({ id: task.id, prompt: '12+7+30', tools: task.tools });
    // The relay put the real key on and sent the call to the session's own path.
    expect(seen.at(-1)).toEqual({ url: '/sessions/anvil-sess_unit.one/v1/chat/completions', auth: 'Bearer anvil-sess_unit.one' });
    expect(r.sandbox.relay.forwarded).toBe(1);
    await r.cleanup();
  });

  it('reads the answer file (text, or JSON with messages) or the last stdout line; a symlinked or FIFO answer is not followed', async () => {
    const a = await run(spec(['sh', '-c', 'printf 49 > "$ANVIL_ANSWER_FILE"']));
    expect(a.finalAnswer).toBe('49');
    const b = await run(spec(['sh', '-c', 'echo noise; echo \'{"calls":2,"finalAnswer":"50"}\'']));
    expect(b.finalAnswer).toBe('50');
    const c = await run(
      spec(['sh', '-c', `echo '{"messages":[{"role":"user","content":"1+2"},{"role":"assistant","content":"3"}]}' > {answerFile}`], {
        taskInput: 'file',
      }),
    );
    expect([c.finalAnswer, c.messages?.length]).toEqual(['3', 2]);
    // The host reads the answer after the run: a link to a host file must not hand that file to the rollout's record.
    const d = await run(spec(['sh', '-c', 'ln -s /etc/shadow "$ANVIL_ANSWER_FILE"; echo fallback']));
    expect([d.answerFile, d.finalAnswer]).toEqual([null, 'fallback']);
    const e = await run(spec(['sh', '-c', 'mkfifo "$ANVIL_ANSWER_FILE"; echo fifo']));
    expect([e.answerFile, e.finalAnswer]).toEqual([null, 'fifo']);
    for (const r of [a, b, c, d, e]) await r.cleanup();
  });

  it('the wall clock stops an agent that ignores SIGTERM, with everything it started', async () => {
    const t0 = performance.now();
    const r = await run(spec(['sh', '-c', '(trap "" TERM; sleep 300) & trap "" TERM; sleep 300']), { timeoutMs: 600 });
    expect(r.timedOut).toBe(true);
    // The clock covers the workspace's preparation too: the sandbox gets what is left of the 600 ms.
    expect(r.sandbox.reason).toBe('timeout');
    const left = Number(/^the wall clock \((\d+) ms\) ran out$/.exec(r.sandbox.detail)?.[1]);
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThanOrEqual(600);
    expect(performance.now() - t0).toBeLessThan(8000);
    await r.cleanup();
  });

  it('caps stdout and stderr, counting the rest; stops at outputBytes; reports exits and an agent that cannot start', async () => {
    const r = await run(spec(['sh', '-c', 'head -c 5000000 /dev/zero | tr "\\0" x; echo oops >&2; exit 3'], { outputCapBytes: 1000 }));
    expect([r.stdout.length, r.stdoutBytes, r.stderr, r.exitCode]).toEqual([1000, 5_000_000, 'oops\n', 3]);
    const big = await run(spec(['sh', '-c', 'head -c 2000000000 /dev/zero'], { sandboxLimits: { outputBytes: 1_000_000 } }));
    expect(big.sandbox).toMatchObject({ reason: 'limit', limit: 'output' });
    expect(big.stdoutBytes).toBeLessThan(100_000_000);
    const s = await run(spec(['/nonexistent/agent']));
    expect(s.sandbox.reason).toBe('setup-failed');
    expect(s.sandbox.detail).toMatch(/cannot start the command/);
    for (const x of [r, big, s]) await x.cleanup();
  });

  it('starts from a task workspace snapshot and runs its setup first, on the same clock; a failing or hung setup ends it', async () => {
    const snap = dir();
    writeFileSync(join(snap, 'repo.txt'), 'snapshot\n');
    const ok = await run(spec(['sh', '-c', 'cat repo.txt built.txt']), {
      t: { workspace: snap, setup: ['sh', '-c', 'echo built > built.txt'] },
    });
    expect(ok.stdout, ok.stderr).toBe('snapshot\nbuilt\n');
    expect(readFileSync(join(snap, 'repo.txt'), 'utf8')).toBe('snapshot\n');
    const bad = await run(spec(['sh', '-c', 'echo never']), { t: { setup: ['sh', '-c', 'echo broken >&2; exit 3'] } });
    expect(bad.sandbox).toMatchObject({ reason: 'setup-failed', detail: 'the setup command exited with 3 (broken)' });
    expect(bad.stdout).toBe('');
    const hung = await run(spec(['sh', '-c', 'echo never']), { t: { setup: ['sleep', '300'] }, timeoutMs: 800 });
    expect(hung.sandbox).toMatchObject({ reason: 'timeout', startMs: null });
    expect(hung.sandbox.detail).toMatch(/before the command started \(in the setup command\)/);
    for (const x of [ok, bad, hung]) await x.cleanup();
  });

  it('sees its read-only paths (starting in its cwd, PATH kept where it leads inside) and cannot write them', async () => {
    const home = dir();
    mkdirSync(join(home, 'bin'));
    writeFileSync(join(home, 'bin', 'agent-tool'), '#!/bin/sh\necho tool ran in "$(pwd)"\n', { mode: 0o755 });
    const saved = process.env.PATH;
    process.env.PATH = `${join(home, 'bin')}:/root/.not-inside/bin:${saved}`;
    try {
      const r = await run(
        spec(['sh', '-c', 'agent-tool; echo "$PATH"; touch bin/x 2>/dev/null || echo refused'], { cwd: home, readOnlyPaths: ['.'] }),
      );
      expect(r.stdout.trim().split('\n')).toEqual([`tool ran in ${home}`, expect.not.stringContaining('/root/.not-inside'), 'refused']);
      expect(r.stdout).toContain(`${home}/bin:`);
      await r.cleanup();
    } finally {
      process.env.PATH = saved;
    }
  });

  it('a sandbox that cannot be had is a setup failure, not an exception', async () => {
    const r = await runBlackBox(
      blackBoxLaunch(spec(['true']), {}, process.cwd()),
      task,
      session(),
      () => Promise.reject(new SandboxUnavailableError('no namespaces here')),
      {
        timeoutMs: 5000,
        label: 'unit',
      },
    );
    expect(r.sandbox).toMatchObject({ reason: 'setup-failed', detail: 'the agent could not be started: no namespaces here' });
    await r.cleanup();
  });
});

describe('black-box agents unsandboxed (none)', () => {
  it('get their session’s own URL and key, and leave nothing running', async () => {
    const daemon = `sleep 299.${process.pid}`;
    const r = await run(
      spec(['sh', '-c', `echo "$OPENAI_BASE_URL"; ${CALL} >/dev/null; (trap "" TERM HUP; setsid ${daemon} &) ; echo started`], {
        sandbox: 'none',
      }),
      {
        key: 'anvil-sess_unit.none',
      },
    );
    expect(r.sandbox).toMatchObject({ backend: 'none', reason: 'exit' });
    expect(r.stdout.split('\n')[0]).toBe(session('anvil-sess_unit.none').baseUrl);
    expect(seen.at(-1)?.url).toBe('/sessions/anvil-sess_unit.none/v1/chat/completions');
    // The none backend's supervisor killed the daemon that left its session.
    expect(execFileSync('sh', ['-c', `pgrep -f "^${daemon}$" || true`], { encoding: 'utf8' }).trim()).toBe('');
    await r.cleanup();
  });
});

describe('agent.env', () => {
  it('refuses credential-like or reserved extra env names', () => {
    expect(() => checkAgentEnv({ GITHUB_TOKEN: 'x', OPENAI_API_KEY: 'y', MODE: 'fast' })).toThrow(AgentSpecError);
    expect(() => checkAgentEnv({ GITHUB_TOKEN: 'x' })).toThrow(/agent.env: .*GITHUB_TOKEN/);
    expect(() => checkAgentEnv({ MODE: 'fast' })).not.toThrow();
  });
});
