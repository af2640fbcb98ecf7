import { chmodSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cwdInside, pathInside, unreadableBySandbox, visibleInside } from './mounts';

const root = mkdtempSync(join(tmpdir(), 'rm-mounts-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('what a local sandbox shows', () => {
  it('the system directories and its mounts, nothing else', () => {
    expect(visibleInside('/usr/local/bin', [])).toBe(true);
    expect(visibleInside('/root/.pyenv/shims', [])).toBe(false);
    expect(visibleInside('/srv/agent/bin', ['/srv/agent'])).toBe(true);
    expect(visibleInside('/srv/agent-other', ['/srv/agent'])).toBe(false);
  });

  it("keeps the manager's PATH entries that lead somewhere inside, in order; the system's when none does", () => {
    expect(pathInside('/srv/venv/bin:/root/.pyenv/shims:/usr/bin:/srv/venv/bin:relative', ['/srv/venv'])).toBe('/srv/venv/bin:/usr/bin');
    expect(pathInside('/root/bin', [])).toBe('/usr/local/bin:/usr/bin:/bin');
    expect(pathInside(undefined, [])).toBe('/usr/local/bin:/usr/bin:/bin');
  });

  it('starts a program in its own directory when it is mounted or above a mount, else in the workspace', () => {
    expect(cwdInside('/repo', ['/tmp/ws', '/repo/examples/agent'], '/tmp/ws')).toBe('/repo');
    expect(cwdInside('/repo/examples/agent/src', ['/tmp/ws', '/repo/examples/agent'], '/tmp/ws')).toBe('/repo/examples/agent/src');
    expect(cwdInside('/repo', ['/tmp/ws'], '/tmp/ws')).toBe('/tmp/ws');
  });

  it("names what keeps a sandbox's uid out of a path", () => {
    const open = join(root, 'open');
    const closed = join(root, 'closed');
    mkdirSync(join(closed, 'inner'), { recursive: true });
    mkdirSync(open);
    chmodSync(root, 0o755);
    chmodSync(open, 0o755);
    chmodSync(closed, 0o700);
    expect(unreadableBySandbox(open)).toBeNull();
    expect(unreadableBySandbox(closed)).toBe(`${closed} is not readable by other users (mode 700)`);
    expect(unreadableBySandbox(join(closed, 'inner'))).toBe(`${closed} is not searchable by other users (mode 700)`);
    expect(unreadableBySandbox(join(root, 'missing'))).toBe(`${join(root, 'missing')} does not exist`);
  });
});
