import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewaySession } from '@anvil/persistence';
import { createLogger } from '@anvil/observability';
import { RolloutRuntime, type RolloutOutcome, type StoredTask, type TaskSetSpecInput } from '@anvil/rollout-manager';
import { ADMIN_TOKEN, oraclePolicy, startRolloutStack, until, type RolloutStack } from './fixtures/rollout-stack';

/**
 * What the sandbox promises a rollout, on the real PostgreSQL server and Kafka broker through the
 * real gateway: for each way an agent can misbehave (writes outside its workspace, the admin API
 * or another session's URL, any other address, a fork bomb, gigabytes of output, never calling,
 * ignoring SIGTERM, orphaned children, a hung setup) the rollout ends with a recorded finish reason
 * and error (in its outcome and in rollout.completed), its session is closed, nothing it started
 * survives (no process of this file's sandbox uids, none carrying its marker in its command line),
 * and a rollout running beside it completes normally. Then the bad input: a failing setup, a
 * hanging test command, a missing workspace snapshot, a kernel that forbids user namespaces, and
 * an unsandboxed agent said so in the run's log.
 *
 * ROLLOUT_SANDBOX_IT_KIND=none runs the same agents unsandboxed: every misbehaviour test then
 * fails (each agent first reports where it runs, and each checks its own promise), which is how
 * these tests were checked to depend on the sandbox.
 */
const root = join(__dirname, '..', '..');
const KIND = (process.env.ROLLOUT_SANDBOX_IT_KIND ?? 'local') as 'local' | 'none';
const UID_BASE = 1_800_300_000;
const UID_COUNT = 64;
const MARK = `rm-sbx-${process.pid}`;
const INSIDE = 'inside 1000 anvil-sandbox';
const SH_INSIDE = 'echo "inside $(id -u) $(uname -n)"';
const PY_INSIDE = 'import os; print("inside", os.getuid(), os.uname().nodename, flush=True)';

let stack: RolloutStack;
let runtime: RolloutRuntime;
const outcomes: RolloutOutcome[] = [];
const logLines: string[] = [];
const leftovers: string[] = [];

beforeAll(async () => {
  stack = await startRolloutStack('sandbox', oraclePolicy());
  runtime = new RolloutRuntime({
    gatewayUrl: stack.gatewayUrl,
    adminToken: ADMIN_TOKEN,
    bus: stack.bus,
    dataSource: stack.ds,
    config: { concurrency: 8, admissionPollMs: 100, consumerGroup: `it.rm.sandbox.${Date.now()}`, repoRoot: root },
    sandbox: { uidBase: UID_BASE, uidCount: UID_COUNT },
    logger: createLogger({ service: 'rollout-manager', level: 'info', sink: (l) => void logLines.push(l) }),
  });
  runtime.onRolloutCompleted((o) => outcomes.push(o));
  await runtime.start();
  // The neighbour: one call through its session after the misbehaving one has started, then its answer.
  const call = `curl -sf -H 'content-type: application/json' -d '{"model":"anvil-tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4}' "$OPENAI_BASE_URL/chat/completions" >/dev/null`;
  await runtime.loadTaskSet(
    { ...taskSet('calm', { command: ['sh', '-c', `sleep 0.5; ${call} && echo 1`], sandbox: 'local' }), limits: { timeoutMs: 60_000 } },
    [task('t')],
  );
});

afterAll(async () => {
  await runtime?.stop();
  await stack?.close();
  for (const p of leftovers) rmSync(p, { recursive: true, force: true });
});

function task(id: string, extra: Partial<StoredTask> = {}): StoredTask {
  return {
    id,
    env: null,
    messages: [{ role: 'user', content: id }],
    tools: [],
    split: 'train',
    difficulty: 0,
    data: { answer: 1 },
    ...extra,
  };
}

function taskSet(id: string, agent: Record<string, unknown>, timeoutMs = 60_000): TaskSetSpecInput {
  return {
    id,
    agent: { kind: 'black-box', name: id, sandbox: KIND, ...agent } as TaskSetSpecInput['agent'],
    verifier: { kind: 'function', name: 'final-answer' },
    limits: { timeoutMs, maxEnvRetries: 0 },
  };
}

/** Runs task set `id` (one rollout) beside the neighbour; the neighbour must complete as usual. */
async function besideNeighbour(id: string): Promise<RolloutOutcome> {
  const mine = (await runtime.submit({ taskSetId: id, groupSize: 1 })).rolloutIds[0];
  const calm = (await runtime.submit({ taskSetId: 'calm', groupSize: 1 })).rolloutIds[0];
  const [o, n] = await until(
    `${id} and its neighbour`,
    () => {
      const a = outcomes.find((x) => x.rolloutId === mine);
      const b = outcomes.find((x) => x.rolloutId === calm);
      return a && b ? ([a, b] as const) : undefined;
    },
    120_000,
  );
  expect(n, `${n.error} ${n.blackBox?.stderr}`).toMatchObject({ finishReason: 'completed', outcomeReward: 1, numCalls: 1 });
  return o;
}

/** Live host processes whose command line carries `mark`, or whose uid is one of this file's sandboxes'. */
function survivors(mark: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    try {
      const status = readFileSync(`/proc/${e}/status`, 'utf8');
      if (/\nState:\tZ/.test(status)) continue;
      const uid = Number(/\nUid:\t(\d+)/.exec(status)?.[1]);
      const cmd = readFileSync(`/proc/${e}/cmdline`, 'utf8').replaceAll('\0', ' ');
      if (cmd.includes(mark) || (uid >= UID_BASE && uid < UID_BASE + UID_COUNT)) out.push(`${e} uid ${uid}: ${cmd.slice(0, 120)}`);
    } catch {
      /* exited meanwhile */
    }
  }
  return out;
}

/** After every misbehaving rollout: its end recorded (outcome and Kafka), its session closed, nothing of it left. */
async function expectContained(o: RolloutOutcome, finishReason: string, error: RegExp | null, mark: string): Promise<void> {
  expect({ finishReason: o.finishReason, error: o.error }, o.blackBox?.stderr).toEqual({
    finishReason,
    error: error ? expect.stringMatching(error) : null,
  });
  const ev = await until(`${o.rolloutId} rollout.completed`, () =>
    stack.of('rollout.completed').find((e) => (e.payload as { rolloutId: string }).rolloutId === o.rolloutId),
  );
  expect(ev.payload).toMatchObject({ finishReason, error: o.error });
  expect((await stack.ds.manager.findOneByOrFail(GatewaySession, { rolloutId: o.rolloutId })).status).toBe('closed');
  expect(survivors(mark)).toEqual([]);
}

describe(`misbehaving black-box agents (sandbox ${KIND})`, () => {
  it('writes outside the workspace: refused everywhere (host dirs absent, read-only paths read-only, the system read-only), the workspace writable', async () => {
    const outside = mkdtempSync(join(tmpdir(), 'rm-sbx-outside-'));
    const ro = mkdtempSync(join(tmpdir(), 'rm-sbx-ro-'));
    chmodSync(outside, 0o777);
    chmodSync(ro, 0o755);
    const targets = [join(outside, 'pwned'), join(ro, 'pwned'), `/etc/${MARK}`, `/usr/${MARK}`, `/root/${MARK}`];
    leftovers.push(outside, ro, ...targets);
    const script = `${SH_INSIDE}; for f in "$@"; do if (echo x > "$f") 2>/dev/null; then echo "wrote $f"; else echo "refused $f"; fi; done; echo x > "$ANVIL_WORKSPACE/mine" && echo wrote-workspace; exit 3`;
    await runtime.loadTaskSet(taskSet('sbx-writes', { command: ['sh', '-c', script, `${MARK}-writes`, ...targets], readOnlyPaths: [ro] }), [
      task('t'),
    ]);
    const o = await besideNeighbour('sbx-writes');
    expect(o.blackBox!.stdout.trim().split('\n')).toEqual([INSIDE, ...targets.map((t) => `refused ${t}`), 'wrote-workspace']);
    expect(targets.filter((t) => existsSync(t))).toEqual([]);
    await expectContained(o, 'env_error', /agent sbx-writes exited with 3/, `${MARK}-writes`);
  });

  it("the admin API and another session's URL: unreachable directly, refused by the relay (whose other session records nothing)", async () => {
    const res = await fetch(`${stack.gatewayUrl}/admin/v1/sessions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ rolloutId: `${MARK}-other`, groupId: `${MARK}-other`, taskId: 'other/t', model: 'anvil-tiny' }),
    });
    const other = (await res.json()) as { sessionId: string; apiKey: string; baseUrl: string };
    expect(res.status, JSON.stringify(other)).toBe(201);
    const body = '{"model":"anvil-tiny","messages":[{"role":"user","content":"steal"}],"max_tokens":4}';
    const script = [
      SH_INSIDE,
      `code() { curl -s -o /dev/null -m 3 --path-as-is -w '%{http_code}' "$@"; }`,
      'echo "direct-admin $(code "$GW/admin/v1/sessions/x")"',
      `echo "direct-other $(code -H 'content-type: application/json' -d '${body}' "$OTHER/chat/completions")"`,
      `echo "relay-other $(code -H 'content-type: application/json' -d '${body}' "http://127.0.0.1:8080/sessions/$OTHER_SESSION/v1/chat/completions")"`,
      'echo "relay-admin $(code http://127.0.0.1:8080/admin/v1/sessions/x)"',
      'echo "relay-dotdot $(code http://127.0.0.1:8080/v1/../admin/v1/sessions/x)"',
      'exit 4',
    ].join('\n');
    await runtime.loadTaskSet(
      taskSet('sbx-admin', {
        command: ['sh', '-c', script, `${MARK}-admin`],
        env: { GW: stack.gatewayUrl, OTHER: other.baseUrl, OTHER_SESSION: other.apiKey },
      }),
      [task('t')],
    );
    const o = await besideNeighbour('sbx-admin');
    expect(o.blackBox!.stdout.trim().split('\n')).toEqual([
      INSIDE,
      'direct-admin 000',
      'direct-other 000',
      'relay-other 403',
      'relay-admin 403',
      'relay-dotdot 403',
    ]);
    expect(o.blackBox!.sandbox.relay.refused).toBe(3);
    expect((await stack.ds.manager.findOneByOrFail(GatewaySession, { id: other.sessionId })).callCount).toBe(0);
    await expectContained(o, 'env_error', /agent sbx-admin exited with 4/, `${MARK}-admin`);
  });

  it('any other address: the database, the broker, the gateway, the inference backend, the internet, DNS', async () => {
    const hostPort = (url: string) => {
      const u = new URL(url.includes('://') ? url : `tcp://${url}`);
      return [u.hostname, Number(u.port)] as const;
    };
    const targets = {
      postgres: hostPort(process.env.DATABASE_URL!),
      kafka: hostPort(process.env.KAFKA_BROKERS!.split(',')[0]),
      gateway: hostPort(stack.gatewayUrl),
      backend: hostPort(stack.proxy.url),
      internet: ['1.1.1.1', 443] as const,
    };
    const probe = `${PY_INSIDE}
import json, socket, sys
out = {}
for name, (host, port) in json.loads(os.environ["TARGETS"]).items():
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        out[name] = "connected"
    except OSError as e:
        out[name] = type(e).__name__
    finally:
        s.close()
try:
    socket.getaddrinfo("example.com", 443)
    out["dns"] = "resolved"
except OSError as e:
    out["dns"] = type(e).__name__
print(json.dumps(out))
sys.exit(5)`;
    await runtime.loadTaskSet(
      taskSet('sbx-network', { command: ['python3', '-c', probe, `${MARK}-network`], env: { TARGETS: JSON.stringify(targets) } }),
      [task('t')],
    );
    const o = await besideNeighbour('sbx-network');
    const [inside, json] = o.blackBox!.stdout.trim().split('\n');
    expect(inside).toBe(INSIDE);
    const reached = JSON.parse(json) as Record<string, string>;
    expect(Object.keys(reached).sort()).toEqual(['backend', 'dns', 'gateway', 'internet', 'kafka', 'postgres']);
    expect(Object.entries(reached).filter(([, v]) => v === 'connected' || v === 'resolved')).toEqual([]);
    await expectContained(o, 'env_error', /agent sbx-network exited with 5/, `${MARK}-network`);
  });

  it('a fork bomb: held to its process limit (forks past it refused), stopped by its wall clock; its neighbour unharmed', async () => {
    // Bounded (at most 127 processes), so that the same test run unsandboxed as root cannot take the machine down.
    const bomb = `${PY_INSIDE}
import time
def bomb(depth):
    for _ in range(2):
        try:
            pid = os.fork()
        except OSError:
            os.write(1, b"-")
            continue
        if pid == 0:
            os.write(1, b"+")
            if depth < 6:
                bomb(depth + 1)
            time.sleep(600)
            os._exit(0)
bomb(0)
time.sleep(600)`;
    await runtime.loadTaskSet(
      taskSet('sbx-forkbomb', { command: ['python3', '-c', bomb, `${MARK}-bomb`], sandboxLimits: { processes: 32 } }, 4_000),
      [task('t')],
    );
    const o = await besideNeighbour('sbx-forkbomb');
    const [inside, forks = ''] = o.blackBox!.stdout.split('\n');
    expect(inside).toBe(INSIDE);
    expect(forks.split('').filter((c) => c === '+').length).toBeLessThan(32);
    expect(forks).toContain('-');
    await expectContained(o, 'timeout', /agent sbx-forkbomb: the wall clock \(\d+ ms\) ran out/, `${MARK}-bomb`);
  });

  it('gigabytes of output: stopped at its output limit, the rest never read', async () => {
    await runtime.loadTaskSet(
      taskSet('sbx-output', {
        command: ['sh', '-c', `${SH_INSIDE}; head -c 4000000000 /dev/zero; echo 1`, `${MARK}-output`],
        outputCapBytes: 4096,
        sandboxLimits: { outputBytes: 64 << 20 },
      }),
      [task('t')],
    );
    const o = await besideNeighbour('sbx-output');
    expect(o.blackBox!.stdout.split('\n')[0]).toBe(INSIDE);
    expect(o.blackBox!.stdout.length).toBe(4096);
    expect(o.blackBox!.stdoutBytes).toBeGreaterThan(64 << 20);
    expect(o.blackBox!.stdoutBytes).toBeLessThan(1 << 30);
    await expectContained(o, 'env_error', /agent sbx-output was stopped: more than 67108864 bytes of output/, `${MARK}-output`);
  });

  it('an agent that never calls and never ends: stopped by its wall clock, its session closed with no call', async () => {
    await runtime.loadTaskSet(
      taskSet('sbx-silent', { command: ['python3', '-c', `${PY_INSIDE}\nimport time\ntime.sleep(600)`, `${MARK}-silent`] }, 1_500),
      [task('t')],
    );
    const o = await besideNeighbour('sbx-silent');
    expect(o.blackBox!.stdout).toBe(`${INSIDE}\n`);
    expect(o.numCalls).toBe(0);
    await expectContained(o, 'timeout', /agent sbx-silent: the wall clock \(\d+ ms\) ran out$/, `${MARK}-silent`);
  });

  it('an agent (and its child) ignoring SIGTERM: killed after the grace', async () => {
    const stubborn = `${PY_INSIDE}
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    time.sleep(600)
time.sleep(600)`;
    await runtime.loadTaskSet(taskSet('sbx-stubborn', { command: ['python3', '-c', stubborn, `${MARK}-stubborn`] }, 1_500), [task('t')]);
    const o = await besideNeighbour('sbx-stubborn');
    expect(o.blackBox!.stdout).toBe(`${INSIDE}\n`);
    expect(o.agentMs).toBeGreaterThanOrEqual(1_400);
    expect(o.agentMs).toBeLessThan(8_000);
    await expectContained(o, 'timeout', /agent sbx-stubborn: the wall clock/, `${MARK}-stubborn`);
  });

  it('orphaned children (a setsid daemon ignoring TERM and HUP, a nohup child) die with the agent that left them', async () => {
    const daemon =
      'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGHUP, signal.SIG_IGN); time.sleep(600)';
    const script = [
      SH_INSIDE,
      `setsid python3 -c '${daemon}' "$0-orphan" </dev/null >/dev/null 2>&1 &`,
      `nohup python3 -c '${daemon}' "$0-nohup" </dev/null >/dev/null 2>&1 &`,
      'sleep 0.5',
      'echo 1',
    ].join('\n');
    await runtime.loadTaskSet(taskSet('sbx-orphans', { command: ['sh', '-c', script, `${MARK}-orphans`] }), [task('t')]);
    const o = await besideNeighbour('sbx-orphans');
    expect(o.blackBox!.stdout).toBe(`${INSIDE}\n1\n`);
    expect(o.outcomeReward).toBe(1);
    await expectContained(o, 'completed', null, `${MARK}-orphans`);
  });

  it('a hung setup: the wall clock covers it, the agent never starts', async () => {
    await runtime.loadTaskSet(taskSet('sbx-setup-hangs', { command: ['sh', '-c', 'echo started'] }, 1_500), [
      task('t', { setup: ['python3', '-c', `${PY_INSIDE}\nimport time\ntime.sleep(600)`, `${MARK}-setup`] }),
    ]);
    const o = await besideNeighbour('sbx-setup-hangs');
    expect(o.blackBox!.stdout).toBe(`${INSIDE}\n`);
    expect(o.blackBox!.sandbox.startMs).toBeNull();
    await expectContained(
      o,
      'timeout',
      /agent sbx-setup-hangs: the wall clock \(\d+ ms\) ran out before the command started \(in the setup command\)/,
      `${MARK}-setup`,
    );
  });
});

describe('bad input', () => {
  it('a setup that fails: env_error naming the task, the agent and the setup’s own words; the agent never starts', async () => {
    await runtime.loadTaskSet(taskSet('sbx-setup-fails', { command: ['sh', '-c', 'echo started'] }), [
      task('t', { setup: ['sh', '-c', 'echo "no such requirement: leftpad" >&2; exit 3'] }),
    ]);
    const o = await besideNeighbour('sbx-setup-fails');
    expect(o.blackBox!.stdout).toBe('');
    await expectContained(
      o,
      'env_error',
      /EnvironmentError: task sbx-setup-fails\/t: agent sbx-setup-fails \((local|none) sandbox\): the setup command exited with 3 \(no such requirement: leftpad\)/,
      'sbx-setup-fails-never',
    );
  });

  it('a test command that hangs: stopped by its own wall clock, env_error naming it', async () => {
    await runtime.loadTaskSet(
      {
        ...taskSet('sbx-test-hangs', { command: ['sh', '-c', 'echo 1'] }),
        verifier: {
          kind: 'command',
          command: ['python3', '-c', 'import time; time.sleep(600)', `${MARK}-test`],
          timeoutMs: 800,
          sandbox: KIND,
        },
      },
      [task('t')],
    );
    const o = await besideNeighbour('sbx-test-hangs');
    await expectContained(o, 'env_error', /verifier command python3 did not finish within 800 ms/, `${MARK}-test`);
  });

  it('a task whose workspace snapshot is missing is refused at load, naming the task and what to give; nothing is stored', async () => {
    const line = JSON.stringify({ id: 'fix-1', prompt: 'fix it', data: { answer: 1 }, workspace: '/nonexistent/snapshots/fix-1' });
    await expect(runtime.loadJsonl(taskSet('sbx-no-snapshot', { command: ['sh', '-c', 'echo 1'] }), line)).rejects.toThrow(
      /task set sbx-no-snapshot: task fix-1: its workspace \/nonexistent\/snapshots\/fix-1 \(the repository snapshot .*\) is not a directory: give an existing directory/,
    );
    expect(await stack.ds.query(`SELECT count(*)::int AS n FROM tasks WHERE task_set_id = 'sbx-no-snapshot'`)).toEqual([{ n: 0 }]);
  });

  it('a kernel that forbids user namespaces: the run configuration check and the task set load say so, naming the agent and what to do', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rm-sbx-forbidden-'));
    leftovers.push(dir);
    writeFileSync(join(dir, 't.jsonl'), '{"id":"a","prompt":"x","data":{"answer":1}}\n');
    writeFileSync(
      join(dir, 'run.json'),
      JSON.stringify({
        task: {
          set: 't.jsonl',
          agent: { kind: 'black-box', name: 'solver', command: ['sh', '-c', 'echo 1'] },
          verifier: { kind: 'function', name: 'final-answer' },
        },
      }),
    );
    // A user namespace of its own whose limit on nested ones is 0: the kernel's refusal, without touching the host's settings.
    const r = spawnSync(
      '/usr/bin/python3',
      [
        'test/integration/fixtures/userns-forbidden.py',
        process.execPath,
        '--import',
        'tsx',
        'test/integration/fixtures/sandbox-forbidden-runner.ts',
        join(dir, 'run.json'),
      ],
      { cwd: root, encoding: 'utf8', timeout: 120_000 },
    );
    expect(r.status, r.stderr).toBe(0);
    const said = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { probe: string; configProblems: string[]; loadError: string };
    const kernel =
      /bwrap could not create user, PID and network namespaces .*user\.max_user_namespaces = 0\. To allow them: sysctl -w user\.max_user_namespaces=/;
    expect(said.probe).toMatch(kernel);
    expect(said.configProblems).toEqual([
      expect.stringMatching(
        /^task\.agent\.sandbox: agent solver cannot run in the local sandbox \(the default; "none" runs it unsandboxed, for trusted programs only\): the local sandbox cannot start here/,
      ),
    ]);
    expect(said.configProblems[0]).toMatch(kernel);
    expect(said.loadError).toMatch(/^task set forbidden: agent solver \(sandbox local\): the local sandbox cannot start here/);
    expect(said.loadError).toMatch(kernel);
  });

  it("an unsandboxed agent says so in the run's log", async () => {
    await runtime.loadTaskSet(
      {
        ...taskSet('sbx-trusted', { command: ['sh', '-c', 'echo 1'] }),
        agent: { kind: 'black-box', name: 'trusted', command: ['sh', '-c', 'echo 1'], sandbox: 'none' },
      },
      [task('t')],
    );
    const warnings = logLines.map((l) => JSON.parse(l) as { level: string; msg: string }).filter((l) => l.level === 'warn');
    expect(warnings.map((w) => w.msg)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^sandbox none: programs run UNSANDBOXED/),
        "task set sbx-trusted: agent trusted runs UNSANDBOXED (sandbox 'none'): trusted programs only",
      ]),
    );
  });
});
