import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { newWorkspace, removeDeadManagersWorkspaces } from './workspaces';

describe('agent workspaces', () => {
  it('are named for their manager; those of a manager that died are removed, the live ones kept', async () => {
    const mine = await newWorkspace('agent');
    expect(mine).toMatch(new RegExp(`/anvil-agent-${process.pid}-\\w{6}$`));
    const deadPid = spawnSync('true').pid!;
    const alive = spawn('sleep', ['30']);
    const dead = join(tmpdir(), `anvil-verifier-${deadPid}-gone00`);
    const other = join(tmpdir(), `anvil-agent-${alive.pid}-live00`);
    for (const d of [dead, other]) {
      mkdirSync(join(d, 'checkout'), { recursive: true });
      writeFileSync(join(d, 'checkout', 'file'), 'x');
    }
    try {
      expect(await removeDeadManagersWorkspaces()).toBeGreaterThanOrEqual(1);
      expect([existsSync(dead), existsSync(other), existsSync(mine)]).toEqual([false, true, true]);
    } finally {
      alive.kill('SIGKILL');
      for (const d of [dead, other, mine]) rmSync(d, { recursive: true, force: true });
    }
  });
});
