import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SandboxUnavailableError } from '../errors';
import { removeWorkspaces, workspace } from '../testing/harness';
import { UidPool } from './uid-pool';

const BASE = 1_900_040_000;
afterAll(removeWorkspaces);
const lockDir = workspace;

/** A pid that certainly belongs to no live process: one that just exited. */
function deadPid(): number {
  return Number(spawnSync('sh', ['-c', 'echo $$'], { encoding: 'utf8' }).stdout.trim());
}

describe('UidPool', () => {
  it('hands out distinct uids, each locked with our pid, and frees them', async () => {
    const dir = lockDir();
    const pool = new UidPool(dir, BASE, 3);
    const leases = [await pool.acquire(), await pool.acquire(), await pool.acquire()];
    expect(new Set(leases.map((l) => l.uid)).size).toBe(3);
    expect(readdirSync(dir).sort()).toEqual(leases.map((l) => String(l.uid)).sort());
    expect(readFileSync(join(dir, String(leases[0].uid)), 'utf8')).toBe(`${process.pid}\n`);
    await expect(pool.acquire()).rejects.toThrow(SandboxUnavailableError);
    await expect(pool.acquire()).rejects.toThrow(/all 3 sandbox uids from 1900040000 are in use/);
    await leases[1].release();
    expect((await pool.acquire()).uid).toBe(leases[1].uid);
  });

  it("shares the range with other hosts: a live host's uid is skipped, a dead host's is taken over", async () => {
    const dir = lockDir();
    writeFileSync(join(dir, String(BASE)), '1\n'); // pid 1 lives
    writeFileSync(join(dir, String(BASE + 1)), `${deadPid()}\n`);
    const pool = new UidPool(dir, BASE, 2);
    const lease = await pool.acquire();
    expect(lease.uid).toBe(BASE + 1);
    expect(readFileSync(join(dir, String(BASE + 1)), 'utf8')).toBe(`${process.pid}\n`);
    await expect(pool.acquire()).rejects.toThrow(/in use/);
  });

  it('refuses a range that is not unprivileged uids', () => {
    expect(() => new UidPool(lockDir(), 0, 10)).toThrow(SandboxUnavailableError);
    expect(() => new UidPool(lockDir(), 2 ** 32 - 5, 10)).toThrow(SandboxUnavailableError);
  });
});
