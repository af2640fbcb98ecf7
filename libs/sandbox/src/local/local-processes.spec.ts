// The local sandbox's processes: the wall clock (setup included), the stop sequence, and the
// promise that nothing a sandbox started outlives it — orphans, daemons, fork bombs, even when
// the host process itself dies.
import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  alive,
  besideNeighbour,
  CHAT_CALL,
  expectNormal,
  localSandboxSuite,
  processesInUidRange,
  quiet,
  workspace,
} from '../testing/harness';
import { LocalSandbox } from './local-backend';

const UID_BASE = 1_900_020_000;
const UID_COUNT = 64;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const suite = localSandboxSuite(UID_BASE, UID_COUNT);

/** Largest number of processes any one sandbox uid had at once while `run` ran, sampled every 20 ms. */
async function peakPerUid<T>(run: Promise<T>): Promise<{ result: T; peak: number }> {
  let peak = 0;
  let done = false;
  const sampler = (async () => {
    while (!done) {
      const byUid = new Map<number, number>();
      for (const p of processesInUidRange(UID_BASE, UID_COUNT)) byUid.set(p.uid, (byUid.get(p.uid) ?? 0) + 1);
      peak = Math.max(peak, ...byUid.values(), 0);
      await sleep(20);
    }
  })();
  const result = await run;
  done = true;
  await sampler;
  return { result, peak };
}

describe('local sandbox: processes', () => {
  it('a program that never exits is stopped by the wall clock', async () => {
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({ label: 'forever', workspace: workspace(), limits: { wallMs: 1500 }, argv: ['sleep', '1000'] }),
    );
    expect({ reason: r.reason, detail: r.detail, signal: r.signal }).toEqual({
      reason: 'timeout',
      detail: 'the wall clock (1500 ms) ran out',
      signal: 'SIGTERM',
    });
    expect(r.wallMs).toBeGreaterThanOrEqual(1500);
    expect(r.wallMs).toBeLessThan(4000);
  });

  it('one that ignores SIGTERM is killed after the grace', async () => {
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({
        label: 'stubborn',
        workspace: workspace(),
        limits: { wallMs: 1000, killGraceMs: 500 },
        argv: ['sh', '-c', "trap '' TERM; echo ready; while true; do sleep 0.1; done"],
      }),
    );
    expect(r.reason).toBe('timeout');
    expect(r.stdout).toBe('ready\n');
    expect(r.wallMs).toBeGreaterThanOrEqual(1500);
    expect(r.wallMs).toBeLessThan(4500);
  });

  it('orphans (setsid, double fork, SIGTERM ignored, holding stdout) die with the program, which ends at once', async () => {
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({
        label: 'orphans',
        workspace: workspace(),
        limits: { wallMs: 20_000 },
        argv: [
          'sh',
          '-c',
          `setsid sh -c "trap '' TERM HUP; sleep 1000" &
           (sh -c "trap '' TERM; sleep 1000 &" &)
           nohup sleep 1000 > /dev/null 2>&1 &
           echo started; exit 0`,
        ],
      }),
    );
    expectNormal(r);
    expect(r.stdout).toBe('started\n');
    // The setsid child holds the stdout pipe: had the run waited for it, it would have taken 1000 s.
    expect(r.wallMs).toBeLessThan(5000);
  });

  it('a fork bomb stays within its process limit; the sandbox and its neighbour survive it', async () => {
    const { result: r, peak } = await peakPerUid(
      besideNeighbour(
        suite.backend,
        suite.gateway,
        () =>
          suite.backend.run({
            label: 'fork-bomb',
            workspace: workspace(),
            limits: { wallMs: 2500, killGraceMs: 200, processes: 40 },
            // Every process forks forever, failed forks included: the bomb stays at its limit until
            // stopped (a 10 ms pause per fork keeps it there without eating the machine).
            argv: ['perl', '-e', 'while (1) { fork; select(undef, undef, undef, 0.01) }'],
          }),
        // The neighbour has the same process limit and forks while the bomb is at its peak: were
        // the limit counted on a shared uid, its forks would fail.
        {
          argv: ['sh', '-c', `sleep 1; python3 -c "$0"; sleep 0.5; echo neighbour done`, CHAT_CALL],
          limits: { wallMs: 30_000, processes: 40 },
        },
      ),
    );
    expect(r.reason).toBe('timeout');
    // Its uid's processes: at most the limit, plus the supervisor and a relay that count on the same uid.
    expect(peak).toBeGreaterThan(30);
    expect(peak).toBeLessThanOrEqual(42);
  });

  it('a hung setup command is covered by the wall clock; the command never starts', async () => {
    const ws = workspace();
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({
        label: 'hung-setup',
        workspace: ws,
        limits: { wallMs: 1000, killGraceMs: 300 },
        setup: ['sh', '-c', "trap '' TERM; sleep 1000"],
        argv: ['touch', join(ws, 'command-ran')],
      }),
    );
    expect({ reason: r.reason, detail: r.detail, startMs: r.startMs }).toEqual({
      reason: 'timeout',
      detail: 'the wall clock (1000 ms) ran out before the command started (in the setup command)',
      startMs: null,
    });
    expect(existsSync(join(ws, 'command-ran'))).toBe(false);
    expect(r.wallMs).toBeLessThan(3500);
  });

  it("a wall clock that runs out in the sandbox's own setup ends it there", async () => {
    const r = await suite.backend.run({ label: 'tiny-clock', workspace: workspace(), limits: { wallMs: 1 }, argv: ['true'] });
    expect(r.reason).toBe('timeout');
    expect(r.detail).toMatch(/^the wall clock \(1 ms\) ran out before the command started \(in the sandbox's setup\)$/);
    expect(r.startMs).toBeNull();
  });

  it('the caller can abort, before or during the run', async () => {
    const before = new AbortController();
    before.abort();
    const early = await suite.backend.run(
      { label: 'abort-early', workspace: workspace(), limits: { wallMs: 5000 }, argv: ['true'] },
      before.signal,
    );
    expect({ reason: early.reason, startMs: early.startMs }).toEqual({ reason: 'aborted', startMs: null });
    const during = new AbortController();
    setTimeout(() => during.abort(), 500);
    const r = await suite.backend.run(
      { label: 'abort', workspace: workspace(), limits: { wallMs: 20_000 }, argv: ['sleep', '1000'] },
      during.signal,
    );
    expect({ reason: r.reason, detail: r.detail }).toEqual({ reason: 'aborted', detail: 'aborted by the caller' });
    expect(r.wallMs).toBeLessThan(3000);
  });

  it('nothing survives when the host process itself is killed; the next host takes over its uid', async () => {
    const ws = workspace();
    const script = resolve(__dirname, '../testing/host-that-dies.ts');
    const host = spawn(process.execPath, ['--import', 'tsx', script, ws], {
      env: { ...process.env, SANDBOX_TEST_UID_BASE: String(UID_BASE + UID_COUNT - 1), SANDBOX_TEST_UID_COUNT: '1' },
      stdio: 'ignore',
    });
    for (let i = 0; i < 600 && !existsSync(join(ws, 'started')); i++) await sleep(50);
    expect(existsSync(join(ws, 'started'))).toBe(true);
    const running = processesInUidRange(UID_BASE + UID_COUNT - 1, 1);
    expect(running.length).toBeGreaterThanOrEqual(2); // the supervisor, the program and its setsid child
    host.kill('SIGKILL');
    for (let i = 0; i < 100 && running.some((p) => alive(p.pid)); i++) await sleep(50);
    expect(running.filter((p) => alive(p.pid))).toEqual([]);
    // Its lock names a dead pid: a new host of the same single-uid range must be able to use the uid.
    const next = await LocalSandbox.create({ uidBase: UID_BASE + UID_COUNT - 1, uidCount: 1, logger: quiet });
    writeFileSync(join(ws, 'next'), '');
    expectNormal(await next.run({ label: 'next-host', workspace: workspace(), limits: { wallMs: 20_000 }, argv: ['true'] }));
  });
});
