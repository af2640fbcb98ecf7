import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayCall, GatewaySession } from '@anvil/persistence';
import { RolloutRuntime, type RolloutOutcome, ChainAddEnvironment, TaskFileError } from '@anvil/rollout-manager';
import { pythonAgentPaths } from './fixtures/agent-paths';
import { ADMIN_TOKEN, oraclePolicy, startRolloutStack, until, type RolloutStack } from './fixtures/rollout-stack';

/**
 * Black-box agents through the real gateway on the real PostgreSQL server and Kafka broker:
 * rollout.started / rollout.completed in Kafka, the agent's calls in PostgreSQL, rewards from the
 * task's verifier, sessions closed whatever the ending; a timeout kills the agent's whole process
 * group; bad task files and unknown verifiers are refused before anything runs.
 */
const root = join(__dirname, '..', '..');
let stack: RolloutStack;
let runtime: RolloutRuntime;
const outcomes: RolloutOutcome[] = [];

beforeAll(async () => {
  stack = await startRolloutStack('blackbox', oraclePolicy());
  runtime = new RolloutRuntime({
    gatewayUrl: stack.gatewayUrl,
    adminToken: ADMIN_TOKEN,
    bus: stack.bus,
    dataSource: stack.ds,
    config: {
      concurrency: 4,
      eta: 4,
      groupsPerStep: 8,
      admissionPollMs: 100,
      consumerGroup: `it.rm.blackbox.${Date.now()}`,
      repoRoot: root,
    },
    verifiers: {
      hangs: () => new Promise(() => undefined),
      throws: () => {
        throw new Error('verifier crashed');
      },
      garbage: () => ({ outcomeReward: Number.NaN }) as never,
    },
  });
  runtime.onRolloutCompleted((o) => outcomes.push(o));
  await runtime.start();
});

afterAll(async () => {
  await runtime?.stop();
  await stack?.close();
});

/** The outcomes of `rolloutIds`, once every one has finished. */
function outcomesOf(rolloutIds: string[], what: string, timeoutMs = 120_000): Promise<RolloutOutcome[]> {
  return until(
    what,
    () => {
      const os = rolloutIds.map((id) => outcomes.find((o) => o.rolloutId === id));
      return os.every(Boolean) ? (os as RolloutOutcome[]) : undefined;
    },
    timeoutMs,
  );
}

/** The call ids the gateway recorded for a rollout's session, in turn order. */
async function recordedCalls(rolloutId: string): Promise<string[]> {
  const rows = (await stack.ds.query(
    `SELECT c.id FROM gateway_calls c JOIN gateway_sessions s ON s.id = c.session_id WHERE s.rollout_id = $1 ORDER BY c.turn_index`,
    [rolloutId],
  )) as { id: string }[];
  return rows.map((r) => r.id);
}

/** The process rewards its rollout.completed carried (in Kafka). */
async function processRewardsOf(rolloutId: string): Promise<unknown[]> {
  const e = await until(`${rolloutId} rollout.completed`, () =>
    stack.of('rollout.completed').find((x) => (x.payload as { rolloutId: string }).rolloutId === rolloutId),
  );
  return (e.payload as { processRewards: unknown[] }).processRewards;
}

/** The example Python agent, its sandbox showing it its code and the venv it runs from. */
const pythonAgent = {
  kind: 'black-box' as const,
  name: 'python-openai',
  command: ['python3', 'examples/python-agent/agent.py'],
  readOnlyPaths: ['examples/python-agent', ...pythonAgentPaths()],
};

const calculatorTasks = [
  { id: 'calc-1', prompt: 'What is 17*23+4? Use the calculator.', data: { answer: 395 }, split: 'train' },
  { id: 'calc-2', prompt: 'What is 6*7? Use the calculator.', data: { answer: 42 }, split: 'train' },
  { id: 'calc-3', prompt: 'What is 2+2? Use the calculator.', data: { answer: 5 }, split: 'train' },
]
  .map((t) => JSON.stringify(t))
  .join('\n');

describe('black-box rollouts', () => {
  it('runs the calculator agent (official openai SDK) per task end to end', async () => {
    await runtime.loadJsonl(
      {
        id: 'calc',
        agent: {
          kind: 'black-box',
          name: 'calculator-agent',
          command: [
            'node',
            '--import',
            'tsx',
            'examples/calculator-agent/main.ts',
            '--task',
            '{prompt}',
            '--turns',
            '3',
            '--max-tokens',
            '128',
          ],
          // Its sandbox shows it its code and the packages it imports, nothing else of the repository.
          readOnlyPaths: ['examples/calculator-agent', 'node_modules'],
        },
        verifier: { kind: 'function', name: 'final-answer' },
        limits: { timeoutMs: 60_000 },
      },
      calculatorTasks,
    );
    const { rolloutIds } = await runtime.submit({ taskSetId: 'calc', groupSize: 2 });
    expect(rolloutIds).toHaveLength(6);
    const done = await until(
      'six completions in Kafka',
      () =>
        stack.of('rollout.completed').filter((e) => rolloutIds.includes((e.payload as { rolloutId: string }).rolloutId)).length >= 6
          ? true
          : undefined,
      120_000,
    );
    expect(done).toBe(true);
    await until('six outcomes', () => rolloutIds.every((id) => outcomes.some((o) => o.rolloutId === id)) || undefined);
    const started = stack.of('rollout.started').filter((e) => rolloutIds.includes((e.payload as { rolloutId: string }).rolloutId));
    expect(started).toHaveLength(6);
    // Queue positions in submission order.
    const pos = rolloutIds.map(
      (id) =>
        (started.find((e) => (e.payload as { rolloutId: string }).rolloutId === id)!.payload as { queuePosition: number }).queuePosition,
    );
    expect(pos).toEqual([...pos].sort((a, b) => a - b));
    expect(new Set(pos).size).toBe(6);
    const completed = stack
      .of('rollout.completed')
      .filter((e) => rolloutIds.includes((e.payload as { rolloutId: string }).rolloutId))
      .map((e) => e.payload as Record<string, unknown>);
    for (const c of completed) {
      const o = outcomes.find((x) => x.rolloutId === c.rolloutId)!;
      expect(c.finishReason, `${String(c.error)} ${o.blackBox?.stdout} ${o.blackBox?.stderr}`).toBe('completed');
      expect(c.outcomeReward, `${o.blackBox?.stdout} ${o.blackBox?.stderr}`).toBe(c.taskId === 'calc/calc-3' ? 0 : 1);
      expect(c.numCalls).toBe(3);
      expect(c.taskId === 'calc/calc-3' ? c.outcomeReward : c.outcomeReward).toBe(c.taskId === 'calc/calc-3' ? 0 : 1);
      expect(c.versionsSpanned).toBe(1);
    }
    // The calls are in PostgreSQL (the gateway's capture rows) and every session is closed.
    const sessions = await stack.ds.manager.find(GatewaySession);
    const ours = sessions.filter((s) => rolloutIds.includes(s.rolloutId));
    expect(ours).toHaveLength(6);
    expect(ours.every((s) => s.status === 'closed')).toBe(true);
    const calls = await stack.ds.manager.count(GatewayCall);
    expect(calls).toBeGreaterThanOrEqual(18);
    // llm_call.recorded events for those rollouts reached Kafka too.
    await until(
      '18 llm_call.recorded',
      () =>
        stack.of('llm_call.recorded').filter((e) => rolloutIds.includes((e.payload as { rolloutId: string }).rolloutId)).length >= 18 ||
        undefined,
    );
  });

  it('runs a Python agent on the official openai package (pip) against built-in chain-add tasks, scored by the environment verifier from its transcript', async () => {
    const probe = spawnSync('python3', ['-c', 'import openai; print(openai.__version__)'], { encoding: 'utf8' });
    if (probe.status !== 0)
      throw new Error(`this test runs a real third-party SDK agent: pip install openai (python3 said: ${probe.stderr.trim()})`);
    await runtime.loadBuiltin({
      id: 'py-chain',
      env: 'chain-add',
      envConfig: { k: 3 },
      seed: 11,
      trainCount: 2,
      evalCount: 0,
      agent: pythonAgent,
      limits: { timeoutMs: 60_000 },
    });
    const { rolloutIds } = await runtime.submit({ taskSetId: 'py-chain', groupSize: 2 });
    const got = await outcomesOf(rolloutIds, 'four python rollouts', 120_000);
    for (const o of got) {
      expect(o.finishReason, `${o.error} ${o.blackBox?.stderr}`).toBe('completed');
      // The oracle policy solves it: the transcript the agent left earns the full chain-add reward (tool calls included).
      expect(o.outcomeReward).toBe(1);
      expect(o.numCalls).toBe(3);
      expect(o.blackBox!.messages!.filter((m) => m.role === 'tool')).toHaveLength(2);
      // Its process rewards (one per call: two right tool calls, the right answer) land on the calls the gateway recorded, in order.
      expect(await processRewardsOf(o.rolloutId)).toEqual((await recordedCalls(o.rolloutId)).map((callId) => ({ callId, value: 1 })));
    }
  });

  it('runs a third-party agent program from PyPI (the llm CLI, its own tool-calling loop, unchanged) on chain-add tasks, scored by the environment verifier from its answer', async () => {
    const probe = spawnSync('llm', ['--version'], { encoding: 'utf8' });
    if (probe.status !== 0)
      throw new Error(
        `this test runs the llm CLI from PyPI: pip install -r examples/llm-cli-agent/requirements.txt (npm test does) (${probe.stderr?.trim() ?? probe.error?.message})`,
      );
    const envConfig = { k: 3 };
    await runtime.loadBuiltin({
      id: 'llm-chain',
      env: 'chain-add',
      envConfig,
      seed: 13,
      trainCount: 2,
      evalCount: 0,
      agent: {
        kind: 'black-box',
        name: 'llm-cli',
        command: ['sh', 'examples/llm-cli-agent/run.sh', '{prompt}'],
        taskInput: 'file',
        readOnlyPaths: ['examples/llm-cli-agent', ...pythonAgentPaths()],
      },
      limits: { timeoutMs: 60_000 },
    });
    const { rolloutIds } = await runtime.submit({ taskSetId: 'llm-chain', groupSize: 2 });
    const got = await outcomesOf(rolloutIds, 'four llm rollouts', 120_000);
    const env = new ChainAddEnvironment(envConfig);
    const tasks = await runtime.tasks.tasks('llm-chain');
    for (const o of got) {
      expect(o.finishReason, `${o.error} ${o.blackBox?.stderr}`).toBe('completed');
      // llm's loop: two tool calls (add, which it executed itself) and the answer, through the gateway.
      expect(o.numCalls).toBe(3);
      const replies = (await stack.ds.query(
        `SELECT c.assistant_message_json AS m FROM gateway_calls c JOIN gateway_sessions s ON s.id = c.session_id WHERE s.rollout_id = $1 ORDER BY c.turn_index`,
        [o.rolloutId],
      )) as { m: string }[];
      expect(replies.map((r) => (JSON.parse(r.m) as { tool_calls?: unknown[] }).tool_calls?.length ?? 0)).toEqual([1, 1, 0]);
      const task = tasks.find((t) => t.id === o.taskId)!;
      const answer = o.blackBox!.finalAnswer;
      expect(answer).toBe(String(task.data.total));
      // The reward is the environment verifier's on what the agent left (its answer; no transcript): no process rewards can be placed.
      const expected = env.verify(task, { messages: [...task.messages, { role: 'assistant', content: answer }], finalAnswer: answer });
      expect(o.outcomeReward).toBe(expected.outcomeReward);
      expect(await processRewardsOf(o.rolloutId)).toEqual([]);
    }
  });

  it("black-box process rewards: a command verifier scores each call the gateway recorded (not the agent's claim); more values than recorded calls is garbage", async () => {
    // Scores each recorded call from the reply the agent got: 0.5 for a tool call, 1 for an answer; `extra` values beyond the calls when EXTRA is set.
    const score = (extra: number) =>
      `let t='';process.stdin.on('data',d=>t+=d).on('end',()=>{const {calls}=JSON.parse(t);const v=calls.map(c=>c.message.tool_calls&&c.message.tool_calls.length?0.5:1);for(let i=0;i<${extra};i++)v.push(0);console.log(JSON.stringify({outcomeReward:1,processRewards:v}))})`;
    for (const [id, extra] of [
      ['py-scored', 0],
      ['py-scored-garbage', 1],
    ] as const) {
      await runtime.loadBuiltin({
        id,
        env: 'chain-add',
        envConfig: { k: 3 },
        seed: 12,
        trainCount: 1,
        evalCount: 0,
        agent: pythonAgent,
        verifier: { kind: 'command', command: ['node', '-e', score(extra)], mode: 'json' },
        limits: { timeoutMs: 60_000 },
      });
    }
    const ok = await runtime.submit({ taskSetId: 'py-scored', groupSize: 1 });
    const bad = await runtime.submit({ taskSetId: 'py-scored-garbage', groupSize: 1 });
    const [o, g] = await outcomesOf([ok.rolloutIds[0], bad.rolloutIds[0]], 'both scored');
    expect(o, `${o.error} ${o.blackBox?.stderr}`).toMatchObject({ finishReason: 'completed', outcomeReward: 1, numCalls: 3 });
    expect(await processRewardsOf(o.rolloutId)).toEqual(
      (await recordedCalls(o.rolloutId)).map((callId, i) => ({ callId, value: i < 2 ? 0.5 : 1 })),
    );
    expect(g).toMatchObject({ finishReason: 'env_error', outcomeReward: null });
    expect(g.error).toMatch(/4 process rewards for 3 recorded calls/);
    expect(await processRewardsOf(g.rolloutId)).toEqual([]);
  });

  it('timeout kills the agent process group (no orphan) and ends the rollout as timeout with its session closed', async () => {
    const pidFile = join(tmpdir(), `rm-it-pid-${process.pid}-${Date.now()}`);
    await runtime.loadTaskSet(
      {
        id: 'sleepy',
        agent: {
          kind: 'black-box',
          name: 'sleeper',
          command: ['sh', '-c', 'sleep 300 & echo $! > "$PIDFILE"; trap "" TERM; sleep 300'],
          env: { PIDFILE: pidFile },
          // It leaves its child's pid in the host's /tmp: unsandboxed (rollout-sandbox.int.spec.ts has the sandboxed cases).
          sandbox: 'none',
        },
        verifier: { kind: 'function', name: 'final-answer' },
        limits: { timeoutMs: 800 },
      },
      [
        {
          id: 't1',
          env: null,
          messages: [{ role: 'user', content: 'sleep' }],
          tools: [],
          split: 'train',
          difficulty: 0,
          data: { answer: 1 },
        },
      ],
    );
    const { rolloutIds } = await runtime.submit({ taskSetId: 'sleepy', groupSize: 1 });
    const o = await until('the timeout', () => outcomes.find((x) => x.rolloutId === rolloutIds[0]), 30_000);
    expect(o.finishReason).toBe('timeout');
    expect(o.wallMs).toBeLessThan(10_000);
    const childPid = Number(readFileSync(pidFile, 'utf8').trim());
    rmSync(pidFile, { force: true });
    const stat = existsSync(`/proc/${childPid}/stat`) ? readFileSync(`/proc/${childPid}/stat`, 'utf8') : null;
    // Gone, or a zombie waiting for a reaper (this container's PID 1 does not reap): not running.
    expect(stat === null || /\) [ZX] /.test(stat)).toBe(true);
    const session = await stack.ds.manager.findOneByOrFail(GatewaySession, { rolloutId: rolloutIds[0] });
    expect(session.status).toBe('closed');
    const ev = await until('rollout.completed timeout', () =>
      stack.of('rollout.completed').find((e) => (e.payload as { rolloutId: string }).rolloutId === rolloutIds[0]),
    );
    expect(ev.payload).toMatchObject({ finishReason: 'timeout', numCalls: 0 });
  });

  it('an agent that exits non-zero, prints gigabytes, forks a child or never calls the gateway ends with a reason and disturbs no other rollout; a verifier that hangs, throws or answers garbage ends it as env_error', async () => {
    const forkPid = join(tmpdir(), `rm-it-fork-${process.pid}-${Date.now()}`);
    await runtime.loadTaskSet(
      {
        id: 'bad-agents',
        agent: {
          kind: 'black-box',
          name: 'bad',
          command: [
            'sh',
            '-c',
            'case "$(cat)" in *crash*) echo dying >&2; exit 7;; *flood*) head -c 2147483648 /dev/zero; echo; echo 1;; *fork*) sleep 300 & echo $! > "$FORK_PID"; echo 1;; *) echo 1;; esac',
          ],
          env: { FORK_PID: forkPid },
          outputCapBytes: 4096,
          // Its forked child's pid goes to the host's /tmp: unsandboxed (rollout-sandbox.int.spec.ts has the sandboxed cases).
          sandbox: 'none',
        },
        verifier: { kind: 'function', name: 'final-answer' },
        limits: { timeoutMs: 60_000 },
      },
      [
        {
          id: 'crash',
          env: null,
          messages: [{ role: 'user', content: 'crash' }],
          tools: [],
          split: 'train',
          difficulty: 0,
          data: { answer: 1 },
        },
        {
          id: 'flood',
          env: null,
          messages: [{ role: 'user', content: 'flood' }],
          tools: [],
          split: 'train',
          difficulty: 0,
          data: { answer: 1 },
        },
        {
          id: 'fork',
          env: null,
          messages: [{ role: 'user', content: 'fork' }],
          tools: [],
          split: 'train',
          difficulty: 0,
          data: { answer: 1 },
        },
        {
          id: 'quiet',
          env: null,
          messages: [{ role: 'user', content: 'quiet' }],
          tools: [],
          split: 'train',
          difficulty: 0,
          data: { answer: 1 },
        },
        ...(['hangs', 'throws', 'garbage'] as const).map((name) => ({
          id: `verifier-${name}`,
          env: null,
          messages: [{ role: 'user' as const, content: 'quiet too' }],
          tools: [],
          split: 'train' as const,
          difficulty: 0,
          data: { answer: 1 },
          verifier: { kind: 'function' as const, name, timeoutMs: 300 },
        })),
      ],
    );
    const { rolloutIds } = await runtime.submit({ taskSetId: 'bad-agents', groupSize: 1 });
    const got = await outcomesOf(rolloutIds, 'seven outcomes', 90_000);
    const by = Object.fromEntries(got.map((o) => [o.taskId.split('/')[1], o]));
    expect(by.crash).toMatchObject({ finishReason: 'env_error', outcomeReward: null });
    expect(by.crash.error).toMatch(/exited with 7: dying/);
    // Two GiB on stdout: counted, 4 KiB kept, the answer (the last line) still read.
    expect(by.flood, by.flood.error ?? '').toMatchObject({ finishReason: 'completed', outcomeReward: 1 });
    expect(by.flood.blackBox!.stdoutBytes).toBeGreaterThan(2 ** 31);
    expect(by.flood.blackBox!.stdout.length).toBe(4096);
    // A child forked into the background dies with the agent that exited.
    expect(by.fork).toMatchObject({ finishReason: 'completed', outcomeReward: 1 });
    const child = Number(readFileSync(forkPid, 'utf8').trim());
    rmSync(forkPid, { force: true });
    await until(
      'the forked child gone',
      () => !existsSync(`/proc/${child}/stat`) || /\) [ZX] /.test(readFileSync(`/proc/${child}/stat`, 'utf8')) || undefined,
      5_000,
    );
    expect(by.quiet).toMatchObject({ finishReason: 'completed', outcomeReward: 1, numCalls: 0 });
    expect(by['verifier-hangs']).toMatchObject({ finishReason: 'env_error', outcomeReward: null });
    expect(by['verifier-hangs'].error).toMatch(/within 300 ms/);
    expect(by['verifier-throws']).toMatchObject({ finishReason: 'env_error', outcomeReward: null });
    expect(by['verifier-throws'].error).toMatch(/verifier crashed/);
    expect(by['verifier-garbage']).toMatchObject({ finishReason: 'env_error', outcomeReward: null });
    expect(by['verifier-garbage'].error).toMatch(/answered garbage/);
    const sessions = await stack.ds.manager.find(GatewaySession);
    expect(sessions.filter((s) => rolloutIds.includes(s.rolloutId)).every((s) => s.status === 'closed')).toBe(true);
    // Every one of them reported once, with its reason.
    const completed = stack.of('rollout.completed').filter((e) => rolloutIds.includes((e.payload as { rolloutId: string }).rolloutId));
    expect(completed).toHaveLength(rolloutIds.length);
  });

  it('an agent flooding the gateway with concurrent calls is stopped at its timeout with its session closed; a rollout beside it completes as usual', async () => {
    const flood = `for i in $(seq 1 40); do (while true; do curl -s -m 5 -X POST -H 'content-type: application/json' -d '{"model":"anvil-tiny","messages":[{"role":"user","content":"flood"}],"max_tokens":4}' "$OPENAI_BASE_URL/chat/completions" >/dev/null; done) & done; wait`;
    await runtime.loadTaskSet(
      {
        id: 'flooder',
        agent: { kind: 'black-box', name: 'flooder', command: ['sh', '-c', flood] },
        verifier: { kind: 'function', name: 'final-answer' },
        // A budget it cannot reach: this one is about the timeout (rollout-call-limits.int.spec.ts is about the budget).
        limits: { timeoutMs: 3_000, maxCalls: 1_000_000 },
      },
      [
        {
          id: 't',
          env: null,
          messages: [{ role: 'user', content: 'flood' }],
          tools: [],
          split: 'train',
          difficulty: 0,
          data: { answer: 1 },
        },
      ],
    );
    const f = await runtime.submit({ taskSetId: 'flooder', groupSize: 1 });
    const calm = await runtime.submit({ taskSetId: 'calc', groupSize: 1, taskIds: ['calc/calc-2'] });
    const [fo, co] = await outcomesOf([f.rolloutIds[0], calm.rolloutIds[0]], 'both outcomes', 60_000);
    expect(fo.finishReason).toBe('timeout');
    expect(fo.numCalls).toBeGreaterThan(40);
    expect(co).toMatchObject({ finishReason: 'completed', outcomeReward: 1, numCalls: 3 });
    const session = await stack.ds.manager.findOneByOrFail(GatewaySession, { rolloutId: f.rolloutIds[0] });
    expect(session.status).toBe('closed');
    // Nothing was recorded after the close: the count it reported is the count the gateway holds.
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await stack.ds.manager.findOneByOrFail(GatewaySession, { rolloutId: f.rolloutIds[0] })).callCount).toBe(fo.numCalls);
    const ev = await until('flooder rollout.completed', () =>
      stack.of('rollout.completed').find((e) => (e.payload as { rolloutId: string }).rolloutId === f.rolloutIds[0]),
    );
    expect(ev.payload).toMatchObject({ finishReason: 'timeout', numCalls: fo.numCalls });
  });

  it('refuses a malformed task file whole (every bad line named, nothing stored), re-loads idempotently, refuses unknown verifiers and agents', async () => {
    const bad = ['{"id":"a","prompt":"x"}', 'nope', '{"id":"b"}'].join('\n');
    const err = await runtime.loadJsonl({ id: 'broken' }, bad, 'broken.jsonl').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskFileError);
    expect((err as TaskFileError).problems.map((p) => p.line)).toEqual([2, 3]);
    expect(await stack.ds.query(`SELECT count(*)::int AS n FROM tasks WHERE task_set_id = 'broken'`)).toEqual([{ n: 0 }]);
    const spec = {
      id: 'calc',
      agent: { kind: 'black-box' as const, name: 'calculator-agent', command: ['true'] },
      verifier: { kind: 'function' as const, name: 'final-answer' },
    };
    await runtime.loadJsonl(spec, calculatorTasks);
    await runtime.loadJsonl(spec, calculatorTasks);
    expect(await stack.ds.query(`SELECT count(*)::int AS n FROM tasks WHERE task_set_id = 'calc'`)).toEqual([{ n: 3 }]);
    await expect(runtime.loadJsonl({ ...spec, id: 'x', verifier: { kind: 'function', name: 'oracle' } }, calculatorTasks)).rejects.toThrow(
      /verifier.name: unknown verifier function "oracle"/,
    );
    await expect(runtime.loadJsonl({ ...spec, id: 'y', agent: { kind: 'grey-box' } } as never, calculatorTasks)).rejects.toThrow(/agent/);
    await expect(runtime.loadJsonl({ ...spec, id: 'z', env: 'no-such-env' }, calculatorTasks)).rejects.toThrow(
      /env: unknown environment "no-such-env"/,
    );
  });
});
