import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayCall, GatewaySession } from '@anvil/persistence';
import { RolloutRuntime, type RolloutOutcome } from '../../apps/rollout-manager/src/runtime';
import { TaskFileError } from '../../apps/rollout-manager/src/tasks/jsonl';
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
    config: { concurrency: 4, eta: 4, groupsPerStep: 8, admissionPollMs: 100, consumerGroup: `it.rm.blackbox.${Date.now()}`, repoRoot: root },
    verifiers: { hangs: () => new Promise(() => undefined) },
  });
  runtime.onRolloutCompleted((o) => outcomes.push(o));
  await runtime.start();
});

afterAll(async () => {
  await runtime?.stop();
  await stack?.close();
});

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
        agent: { kind: 'black-box', name: 'calculator-agent', command: ['node', '--import', 'tsx', 'examples/calculator-agent/main.ts', '--task', '{prompt}', '--turns', '3', '--max-tokens', '128'] },
        verifier: { kind: 'function', name: 'final-answer' },
        limits: { timeoutMs: 60_000 },
      },
      calculatorTasks,
    );
    const { rolloutIds } = await runtime.submit({ taskSetId: 'calc', groupSize: 2 });
    expect(rolloutIds).toHaveLength(6);
    const done = await until(
      'six completions in Kafka',
      () => (stack.of('rollout.completed').filter((e) => rolloutIds.includes((e.payload as { rolloutId: string }).rolloutId)).length >= 6 ? true : undefined),
      120_000,
    );
    expect(done).toBe(true);
    await until('six outcomes', () => rolloutIds.every((id) => outcomes.some((o) => o.rolloutId === id)) || undefined);
    const started = stack.of('rollout.started').filter((e) => rolloutIds.includes((e.payload as { rolloutId: string }).rolloutId));
    expect(started).toHaveLength(6);
    // Queue positions in submission order.
    const pos = rolloutIds.map((id) => (started.find((e) => (e.payload as { rolloutId: string }).rolloutId === id)!.payload as { queuePosition: number }).queuePosition);
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
    await until('18 llm_call.recorded', () => stack.of('llm_call.recorded').filter((e) => rolloutIds.includes((e.payload as { rolloutId: string }).rolloutId)).length >= 18 || undefined);
  });

  it('runs a Python agent on the official openai package (pip) against built-in chain-add tasks, scored by the environment verifier from its transcript', async () => {
    const probe = spawnSync('python3', ['-c', 'import openai; print(openai.__version__)'], { encoding: 'utf8' });
    if (probe.status !== 0) throw new Error(`this test runs a real third-party SDK agent: pip install openai (python3 said: ${probe.stderr.trim()})`);
    await runtime.loadBuiltin({
      id: 'py-chain',
      env: 'chain-add',
      envConfig: { k: 3 },
      seed: 11,
      trainCount: 2,
      evalCount: 0,
      agent: { kind: 'black-box', name: 'python-openai', command: ['python3', 'examples/python-agent/agent.py'] },
      limits: { timeoutMs: 60_000 },
    });
    const { rolloutIds } = await runtime.submit({ taskSetId: 'py-chain', groupSize: 2 });
    const got = await until(
      'four python rollouts',
      () => {
        const os = rolloutIds.map((id) => outcomes.find((o) => o.rolloutId === id));
        return os.every(Boolean) ? (os as RolloutOutcome[]) : undefined;
      },
      120_000,
    );
    for (const o of got) {
      expect(o.finishReason, `${o.error} ${o.blackBox?.stderr}`).toBe('completed');
      // The oracle policy solves it: the transcript the agent left earns the full chain-add reward (tool calls included).
      expect(o.outcomeReward).toBe(1);
      expect(o.numCalls).toBe(3);
      expect(o.blackBox!.messages!.filter((m) => m.role === 'tool')).toHaveLength(2);
    }
  });

  it('timeout kills the agent process group (no orphan) and ends the rollout as timeout with its session closed', async () => {
    const pidFile = join(tmpdir(), `rm-it-pid-${process.pid}-${Date.now()}`);
    await runtime.loadTaskSet(
      {
        id: 'sleepy',
        agent: { kind: 'black-box', name: 'sleeper', command: ['sh', '-c', 'sleep 300 & echo $! > "$PIDFILE"; trap "" TERM; sleep 300'], env: { PIDFILE: pidFile } },
        verifier: { kind: 'function', name: 'final-answer' },
        limits: { timeoutMs: 800 },
      },
      [{ id: 't1', env: null, messages: [{ role: 'user', content: 'sleep' }], tools: [], split: 'train', difficulty: 0, data: { answer: 1 } }],
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
    const ev = await until('rollout.completed timeout', () => stack.of('rollout.completed').find((e) => (e.payload as { rolloutId: string }).rolloutId === rolloutIds[0]));
    expect(ev.payload).toMatchObject({ finishReason: 'timeout', numCalls: 0 });
  });

  it('an agent that exits non-zero, floods stdout or never calls the gateway ends with a reason and disturbs no other rollout; a hanging verifier ends as env_error', async () => {
    await runtime.loadTaskSet(
      {
        id: 'bad-agents',
        agent: {
          kind: 'black-box',
          name: 'bad',
          command: ['sh', '-c', 'case "$(cat)" in *crash*) echo dying >&2; exit 7;; *flood*) head -c 20000000 /dev/zero; echo; echo 1;; *) echo 1;; esac'],
          outputCapBytes: 4096,
        },
        verifier: { kind: 'function', name: 'final-answer' },
        limits: { timeoutMs: 20_000 },
      },
      [
        { id: 'crash', env: null, messages: [{ role: 'user', content: 'crash' }], tools: [], split: 'train', difficulty: 0, data: { answer: 1 } },
        { id: 'flood', env: null, messages: [{ role: 'user', content: 'flood' }], tools: [], split: 'train', difficulty: 0, data: { answer: 1 } },
        { id: 'quiet', env: null, messages: [{ role: 'user', content: 'quiet' }], tools: [], split: 'train', difficulty: 0, data: { answer: 1 } },
        {
          id: 'hang',
          env: null,
          messages: [{ role: 'user', content: 'quiet too' }],
          tools: [],
          split: 'train',
          difficulty: 0,
          data: { answer: 1 },
          verifier: { kind: 'function', name: 'hangs', timeoutMs: 300 },
        },
      ],
    );
    const { rolloutIds } = await runtime.submit({ taskSetId: 'bad-agents', groupSize: 1 });
    const got = await until('four outcomes', () => {
      const os = rolloutIds.map((id) => outcomes.find((o) => o.rolloutId === id));
      return os.every(Boolean) ? (os as RolloutOutcome[]) : undefined;
    });
    const by = Object.fromEntries(got.map((o) => [o.taskId.split('/')[1], o]));
    expect(by.crash).toMatchObject({ finishReason: 'env_error', outcomeReward: null });
    expect(by.crash.error).toMatch(/exited with 7: dying/);
    expect(by.flood, by.flood.error ?? '').toMatchObject({ finishReason: 'completed', outcomeReward: 1 });
    expect(by.flood.blackBox!.stdoutBytes).toBeGreaterThan(20_000_000);
    expect(by.flood.blackBox!.stdout.length).toBe(4096);
    expect(by.quiet).toMatchObject({ finishReason: 'completed', outcomeReward: 1, numCalls: 0 });
    expect(by.hang).toMatchObject({ finishReason: 'env_error', outcomeReward: null });
    expect(by.hang.error).toMatch(/within 300 ms/);
    const sessions = await stack.ds.manager.find(GatewaySession);
    expect(sessions.filter((s) => rolloutIds.includes(s.rolloutId)).every((s) => s.status === 'closed')).toBe(true);
  });

  it('refuses a malformed task file whole (every bad line named, nothing stored), re-loads idempotently, refuses unknown verifiers and agents', async () => {
    const bad = ['{"id":"a","prompt":"x"}', 'nope', '{"id":"b"}'].join('\n');
    const err = await runtime.loadJsonl({ id: 'broken' }, bad, 'broken.jsonl').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskFileError);
    expect((err as TaskFileError).problems.map((p) => p.line)).toEqual([2, 3]);
    expect(await stack.ds.query(`SELECT count(*)::int AS n FROM tasks WHERE task_set_id = 'broken'`)).toEqual([{ n: 0 }]);
    const spec = { id: 'calc', agent: { kind: 'black-box' as const, name: 'calculator-agent', command: ['true'] }, verifier: { kind: 'function' as const, name: 'final-answer' } };
    await runtime.loadJsonl(spec, calculatorTasks);
    await runtime.loadJsonl(spec, calculatorTasks);
    expect(await stack.ds.query(`SELECT count(*)::int AS n FROM tasks WHERE task_set_id = 'calc'`)).toEqual([{ n: 3 }]);
    await expect(runtime.loadJsonl({ ...spec, id: 'x', verifier: { kind: 'function', name: 'oracle' } }, calculatorTasks)).rejects.toThrow(/verifier.name: unknown verifier function "oracle"/);
    await expect(runtime.loadJsonl({ ...spec, id: 'y', agent: { kind: 'grey-box' } } as never, calculatorTasks)).rejects.toThrow(/agent/);
    await expect(runtime.loadJsonl({ ...spec, id: 'z', env: 'no-such-env' }, calculatorTasks)).rejects.toThrow(/env: unknown environment "no-such-env"/);
  });
});
