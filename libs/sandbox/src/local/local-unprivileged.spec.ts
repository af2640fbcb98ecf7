// The local backend started by a user that is not root: no uid to drop to, so bwrap runs as
// the caller (its own unprivileged user namespace); the isolation is the same.
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot, traversableBy } from '../install/paths';
import { isRoot } from '../testing/harness';

const NOBODY = 65534;
const root = repoRoot();
const reachable = isRoot() && traversableBy(join(root, 'node_modules', 'tsx', 'package.json'), NOBODY, NOBODY) === null;

describe('local sandbox, host not root', () => {
  it.skipIf(!reachable)("sandboxes as the caller's own uid (uid 1000 inside, its own PID namespace)", () => {
    const ws = mkdtempSync(join(tmpdir(), 'anvil-sandbox-test-'));
    chownSync(ws, NOBODY, NOBODY);
    chmodSync(ws, 0o700);
    const r = spawnSync(
      'setpriv',
      [
        '--reuid',
        String(NOBODY),
        '--regid',
        String(NOBODY),
        '--clear-groups',
        '--',
        process.execPath,
        '--import',
        'tsx',
        resolve(__dirname, '../testing/unprivileged-host.ts'),
        ws,
      ],
      {
        cwd: root,
        encoding: 'utf8',
        env: { PATH: process.env.PATH, HOME: tmpdir(), ANVIL_CACHE_DIR: join(root, '.cache') },
        timeout: 60_000,
      },
    );
    expect(r.stderr).toBe('');
    const result = JSON.parse(r.stdout.trim().split('\n').at(-1) ?? '{}') as { reason: string; exitCode: number; stdout: string };
    expect({ reason: result.reason, exitCode: result.exitCode, stdout: result.stdout }).toEqual({
      reason: 'exit',
      exitCode: 0,
      stdout: '1000\n2\n',
    });
    expect(statSync(join(ws, 'made')).uid).toBe(NOBODY);
    rmSync(ws, { recursive: true });
  });
});
