import { spawn, type ChildProcess } from 'node:child_process';
import { statSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { processesOfUids, sleep } from './proc-scan';
import { UidSweeper } from './uid-sweeper';

const BASE = 1_900_050_000;
const root = process.getuid?.() === 0;
const children: ChildProcess[] = [];
afterEach(() => children.splice(0).forEach((c) => c.kill('SIGKILL')));

/** A process running as `uid` (root only), optionally made non-dumpable so the files under /proc/<pid> show root as their owner. */
async function runAs(uid: number, dumpable: boolean): Promise<number> {
  const py = `import ctypes,time\n${dumpable ? '' : 'ctypes.CDLL(None).prctl(4,0,0,0,0)\n'}print('up',flush=True)\ntime.sleep(60)`;
  const c = spawn('setpriv', ['--reuid', String(uid), '--regid', String(uid), '--clear-groups', '/usr/bin/python3', '-c', py]);
  children.push(c);
  await new Promise<void>((resolve, reject) => {
    c.stdout?.once('data', () => resolve());
    c.once('exit', (code) => reject(new Error(`setpriv exited ${code}`)));
  });
  return c.pid!;
}

describe('UidSweeper', () => {
  it('serves every uid asked about in one turn from one pass, and spaces passes apart', async () => {
    const passes: number[] = [];
    const sweeper = new UidSweeper(
      { base: BASE, count: 4 },
      () => {
        passes.push(performance.now());
        return new Map([[BASE + 1, [42]]]);
      },
      50,
    );
    const answers = await Promise.all([0, 1, 2, 3].map((i) => sweeper.processesOf(BASE + i)));
    expect(answers).toEqual([[], [42], [], []]);
    expect(sweeper.sweeps).toBe(1);
    await sweeper.processesOf(BASE);
    expect(sweeper.sweeps).toBe(2);
    expect(passes[1] - passes[0]).toBeGreaterThanOrEqual(45);
  });

  it('hands a failed pass to everyone waiting on it', async () => {
    const sweeper = new UidSweeper({ base: BASE, count: 2 }, () => {
      throw new Error('no /proc');
    });
    const [a, b] = await Promise.allSettled([sweeper.processesOf(BASE), sweeper.processesOf(BASE + 1)]);
    expect(a.status === 'rejected' && String(a.reason)).toMatch(/no \/proc/);
    expect(b.status).toBe('rejected');
  });

  it.runIf(root)('finds and kills processes of the range, a non-dumpable one (its /proc files owned by root) included', async () => {
    const visible = await runAs(BASE + 2, true);
    const hidden = await runAs(BASE + 3, false);
    expect(statSync(`/proc/${hidden}/environ`).uid).toBe(0);
    expect(statSync(`/proc/${hidden}`).uid).toBe(BASE + 3);
    const found = processesOfUids({ base: BASE, count: 4 });
    expect(found.get(BASE + 2)).toContain(visible);
    expect(found.get(BASE + 3)).toContain(hidden);
    expect(found.has(BASE)).toBe(false);

    const sweeper = new UidSweeper({ base: BASE, count: 4 });
    const [a, b] = await Promise.all([sweeper.killUid(BASE + 2), sweeper.killUid(BASE + 3)]);
    expect(a).toEqual({ found: expect.arrayContaining([visible]), left: [] });
    expect(b).toEqual({ found: expect.arrayContaining([hidden]), left: [] });
    await sleep(20);
    expect(processesOfUids({ base: BASE, count: 4 }).size).toBe(0);
  });
});
