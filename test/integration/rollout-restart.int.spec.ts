import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewaySession } from '@anvil/persistence';
import { RolloutRuntime, type RolloutOutcome } from '@anvil/rollout-manager';
import { ADMIN_TOKEN, oraclePolicy, startRolloutStack, until, type RolloutStack } from './fixtures/rollout-stack';

/**
 * Killing the rollout manager mid-run (SIGKILL, real Kafka + PostgreSQL + gateway): its black-box
 * agents die with it (their sandbox's supervisor has its host's death as its own); the next one
 * ends every rollout that was running as aborted, once, with its session closed; what was queued
 * runs to completion; a third start reports nothing again.
 */
const root = join(__dirname, '..', '..');
let stack: RolloutStack;
const pidDir = mkdtempSync(join(tmpdir(), 'rm-crash-'));
const group = `it.rm.crash.${Date.now()}`;

beforeAll(async () => {
  stack = await startRolloutStack('restart', oraclePolicy());
});
afterAll(async () => {
  await stack?.close();
  rmSync(pidDir, { recursive: true, force: true });
});

const running = (pid: number) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^[ZX]$/.test(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]);
  } catch {
    return false;
  }
};

describe('rollout manager killed mid-run', () => {
  it('aborts its in-flight rollouts once on restart, sessions closed, agents killed; queued work resumes', async () => {
    const child = spawn(
      'npx',
      [
        'tsx',
        'test/integration/fixtures/rollout-crash-runner.ts',
        stack.brokers,
        stack.scratch.url,
        stack.topicPrefix,
        stack.gatewayUrl,
        ADMIN_TOKEN,
        group,
        pidDir,
      ],
      {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
      },
    );
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const line = await until(
      'the runner to have 4 rollouts running',
      () =>
        /RUNNING (.*)/.exec(out)?.[1] ??
        (child.exitCode !== null
          ? (() => {
              throw new Error(out);
            })()
          : undefined),
      120_000,
    );
    const ids = JSON.parse(line) as { running: string[]; queued: string[] };
    const agentPids = readdirSync(pidDir).map((f) => Number(readFileSync(join(pidDir, f), 'utf8').trim()));
    expect(agentPids).toHaveLength(2);
    expect(agentPids.every(running)).toBe(true);
    // Every running rollout has an open session.
    const openBefore = await stack.ds.manager.find(GatewaySession);
    expect(ids.running.every((id) => openBefore.some((s) => s.rolloutId === id && s.status === 'open'))).toBe(true);
    // The next rollout to start already has its session, opened ahead while it waits for a slot.
    const prepared = (await stack.ds.query(
      `SELECT id, session_id FROM rm_rollouts WHERE id = ANY($1) AND status = 'queued' AND session_id IS NOT NULL`,
      [ids.queued],
    )) as {
      id: string;
      session_id: string;
    }[];
    expect(prepared.length).toBeGreaterThan(0);
    // The hard way: the whole process tree of the runner (npx → tsx → node), not its agents (own groups):
    // they go with their manager all the same, their supervisor having its death as its own.
    process.kill(-child.pid!, 'SIGKILL');
    await new Promise((r) => child.once('exit', r));
    await until('the agents gone with their manager', () => agentPids.every((p) => !running(p)) || undefined, 10_000);

    const outcomes: RolloutOutcome[] = [];
    const second = new RolloutRuntime({
      gatewayUrl: stack.gatewayUrl,
      adminToken: ADMIN_TOKEN,
      bus: stack.bus,
      dataSource: stack.ds,
      config: { concurrency: 4, admissionPollMs: 100, consumerGroup: group },
    });
    second.onRolloutCompleted((o) => outcomes.push(o));
    await second.start();
    const completedOf = (id: string) => stack.of('rollout.completed').filter((e) => (e.payload as { rolloutId: string }).rolloutId === id);
    await until('aborted completions', () => ids.running.every((id) => completedOf(id).length > 0) || undefined).catch(
      async (err: Error) => {
        throw new Error(
          `${err.message}: ${JSON.stringify(second.snapshot())} ${JSON.stringify(await stack.ds.query('SELECT id, status, manager FROM rm_groups'))} ${JSON.stringify(await stack.ds.query('SELECT id, status FROM rm_rollouts'))}`,
        );
      },
    );
    for (const id of ids.running) expect(completedOf(id)[0].payload).toMatchObject({ finishReason: 'aborted', outcomeReward: null });
    const sessions = await stack.ds.manager.find(GatewaySession);
    expect(ids.running.every((id) => sessions.some((s) => s.rolloutId === id && s.status === 'closed'))).toBe(true);
    // The queued group was resumed and finished normally.
    await until('the queued group done', () => ids.queued.every((id) => outcomes.some((o) => o.rolloutId === id)) || undefined, 60_000);
    for (const id of ids.queued)
      expect(outcomes.find((o) => o.rolloutId === id)).toMatchObject({ finishReason: 'completed', outcomeReward: 1 });
    await second.stop();
    // None left open: the sessions opened ahead for rollouts that had not started were closed too (and recorded nothing).
    const all = await stack.ds.manager.find(GatewaySession);
    const ours = all.filter((x) => [...ids.running, ...ids.queued].includes(x.rolloutId));
    expect(ours.filter((x) => x.status !== 'closed').map((x) => x.rolloutId)).toEqual([]);
    for (const p of prepared) expect(all.find((x) => x.id === p.session_id)).toMatchObject({ status: 'closed', callCount: 0 });

    // A third start finds nothing left to report.
    const before = stack.of('rollout.completed').length;
    const third = new RolloutRuntime({
      gatewayUrl: stack.gatewayUrl,
      adminToken: ADMIN_TOKEN,
      bus: stack.bus,
      dataSource: stack.ds,
      config: { concurrency: 4, admissionPollMs: 100, consumerGroup: group },
    });
    await third.start();
    await new Promise((r) => setTimeout(r, 1500));
    expect(stack.of('rollout.completed').length).toBe(before);
    expect(third.snapshot()).toMatchObject({ running: 0, queuedGroups: 0, readyRollouts: 0 });
    await third.stop();
    // None reported twice: one rollout.completed per rollout, with its deterministic event id.
    for (const id of [...ids.running, ...ids.queued]) {
      const evs = completedOf(id);
      expect(new Set(evs.map((e) => e.id))).toEqual(new Set([`${id}:completed`]));
    }
  });
});
