import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { chainAddTask } from '../environments/chain-add';
import { agentSpecSchema } from '../tasks/task-set';
import { AgentSpecError, checkAgentEnv, groupAlive, runBlackBox } from './black-box';

const task = chainAddTask([12, 7, 30]);
const session = { baseUrl: 'http://127.0.0.1:9/sessions/anvil-s1.secret/v1', apiKey: 'anvil-s1.secret' };
const spec = (command: string[], extra: Record<string, unknown> = {}) => {
  const s = agentSpecSchema.parse({ kind: 'black-box', name: 'sh', command, ...extra });
  if (s.kind !== 'black-box') throw new Error('unreachable');
  return s;
};
/** Running (a killed process whose parent is gone stays a zombie here: PID 1 of this container does not reap). */
const alive = (pid: number) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^[ZX]$/.test(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]);
  } catch {
    return false;
  }
};

describe('black-box agent processes', () => {
  it('gets its own session credentials and nothing else of the manager environment, the task on stdin', async () => {
    process.env.ANVIL_TEST_SECRET_TOKEN = 'must-not-leak';
    const r = await runBlackBox(spec(['sh', '-c', 'env | sort; echo ---; cat']), task, session, { timeoutMs: 5000 });
    delete process.env.ANVIL_TEST_SECRET_TOKEN;
    const [envText, stdin] = r.stdout.split('---\n');
    const names = envText
      .trim()
      .split('\n')
      .map((l) => l.split('=')[0]);
    expect(names).toEqual(
      expect.arrayContaining(['OPENAI_BASE_URL', 'OPENAI_API_KEY', 'ANVIL_TASK_FILE', 'ANVIL_ANSWER_FILE', 'PATH', 'HOME']),
    );
    expect(envText).toContain(`OPENAI_BASE_URL=${session.baseUrl}`);
    expect(envText).not.toContain('must-not-leak');
    expect(names.filter((n) => /TOKEN|SECRET|DATABASE|KAFKA/.test(n))).toEqual([]);
    expect(JSON.parse(stdin)).toMatchObject({ id: task.id, prompt: '12+7+30', tools: task.tools });
    expect(r.exitCode).toBe(0);
    await r.cleanup();
  });

  it('reads the answer file (text or JSON with messages) and falls back to the last stdout line', async () => {
    const a = await runBlackBox(spec(['sh', '-c', 'printf 49 > "$ANVIL_ANSWER_FILE"']), task, session, { timeoutMs: 5000 });
    expect(a.finalAnswer).toBe('49');
    const b = await runBlackBox(spec(['sh', '-c', 'echo noise; echo \'{"calls":2,"finalAnswer":"50"}\'']), task, session, {
      timeoutMs: 5000,
    });
    expect(b.finalAnswer).toBe('50');
    const c = await runBlackBox(
      spec(['sh', '-c', `echo '{"messages":[{"role":"user","content":"1+2"},{"role":"assistant","content":"3"}]}' > {answerFile}`], {
        taskInput: 'file',
      }),
      task,
      session,
      {
        timeoutMs: 5000,
      },
    );
    expect(c.finalAnswer).toBe('3');
    expect(c.messages).toHaveLength(2);
    for (const r of [a, b, c]) await r.cleanup();
  });

  it('timeout kills the whole process group: no orphan is left', async () => {
    const t0 = performance.now();
    const r = await runBlackBox(spec(['sh', '-c', 'sleep 300 & echo $!; trap "" TERM; sleep 300']), task, session, {
      timeoutMs: 400,
      killGraceMs: 200,
    });
    expect(r.timedOut).toBe(true);
    expect(performance.now() - t0).toBeLessThan(5000);
    const childPid = Number(r.stdout.trim().split('\n')[0]);
    expect(childPid).toBeGreaterThan(0);
    await new Promise((res) => setTimeout(res, 100));
    expect(alive(childPid)).toBe(false);
    expect(groupAlive(r.pid!)).toBe(false);
    await r.cleanup();
  });

  it('a forked child of an agent that exited on its own dies with it', async () => {
    const r = await runBlackBox(spec(['sh', '-c', 'sleep 300 & echo $!; exit 0']), task, session, { timeoutMs: 5000 });
    expect(r.timedOut).toBe(false);
    const childPid = Number(r.stdout.trim());
    await new Promise((res) => setTimeout(res, 100));
    expect(alive(childPid)).toBe(false);
    await r.cleanup();
  });

  it('caps stdout and stderr, counting what it dropped; reports non-zero exits and spawn failures', async () => {
    const r = await runBlackBox(
      spec(['sh', '-c', 'head -c 5000000 /dev/zero | tr "\\0" x; echo oops >&2; exit 3'], { outputCapBytes: 1000 }),
      task,
      session,
      { timeoutMs: 10_000 },
    );
    expect(r.stdout.length).toBe(1000);
    expect(r.stdoutBytes).toBe(5_000_000);
    expect(r.stderr).toBe('oops\n');
    expect(r.exitCode).toBe(3);
    await r.cleanup();
    const s = await runBlackBox(spec(['/nonexistent/agent']), task, session, { timeoutMs: 5000 });
    expect(s.signal).toBe('spawn-error');
    expect(s.stderr).toMatch(/spawn failed/);
    await s.cleanup();
  });

  it('refuses credential-like or reserved extra env names', () => {
    expect(() => checkAgentEnv({ GITHUB_TOKEN: 'x', OPENAI_API_KEY: 'y', MODE: 'fast' })).toThrow(AgentSpecError);
    expect(() => checkAgentEnv({ GITHUB_TOKEN: 'x' })).toThrow(/agent.env: .*GITHUB_TOKEN/);
    expect(() => checkAgentEnv({ MODE: 'fast' })).not.toThrow();
  });
});
