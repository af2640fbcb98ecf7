// The local sandbox's file system and process view: a writable workspace, a read-only system,
// nothing of the host's files, and no view of another sandbox. Real bwrap sandboxes, each
// beside a well-behaved neighbour; after each, no process of the test's uid range is left.
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { besideNeighbour, expectNormal, isRoot, localSandboxSuite, processesInUidRange, python, workspace } from '../testing/harness';

const UID_BASE = 1_900_000_000;
const UID_COUNT = 64;
const repoFile = resolve(__dirname, '../../../../package.json');

const suite = localSandboxSuite(UID_BASE, UID_COUNT);

describe('local sandbox: files', () => {
  it('writes go to the workspace only; /tmp and $HOME are private and gone afterwards', async () => {
    const ws = workspace();
    writeFileSync(join(ws, 'given.txt'), 'from the host');
    const marker = `anvil-sandbox-marker-${process.pid}-${Date.now()}`;
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({
        label: 'writes',
        workspace: ws,
        limits: { wallMs: 20_000 },
        argv: python(`
import os
results = {}
for path in ['/usr/${marker}', '/etc/${marker}', '/${marker}', '/run/anvil/${marker}', '/bin/${marker}', '/proc/${marker}', '/dev/${marker}', '/home/${marker}', '/run/${marker}']:
    try:
        open(path, 'w').write('x'); results[path] = 'written'
    except OSError as e:
        results[path] = type(e).__name__
print(results)
open('/tmp/${marker}', 'w').write('tmp'); open(os.path.expanduser('~/${marker}'), 'w').write('home')
open('/dev/shm/${marker}', 'w').write('shm'); open('/dev/null', 'w').write('null')
open('${ws}/made.txt', 'w').write(open('${ws}/given.txt').read() + ' and the sandbox')
print('written:', sorted(os.listdir('${ws}')))
`),
      }),
    );
    expectNormal(r);
    expect(r.stdout).not.toContain("'written'");
    expect(r.stdout).toContain("written: ['given.txt', 'made.txt']");
    expect(readFileSync(join(ws, 'made.txt'), 'utf8')).toBe('from the host and the sandbox');
    for (const p of [`/tmp/${marker}`, `/usr/${marker}`, `/etc/${marker}`, `/${marker}`]) expect(existsSync(p), p).toBe(false);
    // The workspace is handed back to its owner, files the sandbox made included.
    const owner = statSync(ws).uid;
    expect(statSync(join(ws, 'made.txt')).uid).toBe(owner);
  });

  it("sees none of the host's files (not the repository, not /root, not the host's users), and has no privilege", async () => {
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({
        label: 'reads',
        workspace: workspace(),
        limits: { wallMs: 20_000 },
        argv: python(`
import os
for path in ['${repoFile}', '/root', '/work', '/etc/shadow', '/etc/resolv.conf', '/var/lib', '/home']:
    print(path, os.path.exists(path) and sorted(os.listdir(path)) if os.path.isdir(path) else os.path.exists(path))
print('users', [l.split(':')[0] for l in open('/etc/passwd')])
print('caps', [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')])
print('nested userns', os.system('unshare -U true 2>/dev/null') == 0)
`),
      }),
    );
    expectNormal(r);
    expect(existsSync(repoFile)).toBe(true);
    expect(r.stdout).toContain(`${repoFile} False`);
    expect(r.stdout).toContain('/root False');
    expect(r.stdout).toContain('/work False');
    expect(r.stdout).toContain('/etc/shadow False');
    expect(r.stdout).toContain('/etc/resolv.conf False');
    expect(r.stdout).toContain("/home ['agent']");
    expect(r.stdout).toContain("users ['root', 'agent', 'nobody']");
    expect(r.stdout).toContain("caps ['0000000000000000']");
    expect(r.stdout).toContain('nested userns False');
  });

  it("cannot read another sandbox's environment (or see its processes at all)", async () => {
    const secret = `secret-${Date.now()}`;
    const ws = workspace();
    // The victim publishes nothing but runs until the reader is done.
    const victim = suite.backend.run({
      label: 'victim',
      workspace: ws,
      env: { VICTIM_SECRET: secret },
      limits: { wallMs: 20_000 },
      argv: ['sh', '-c', `echo started > ${ws}/started; while [ ! -e ${ws}/done ]; do sleep 0.05; done`],
    });
    while (!existsSync(join(ws, 'started'))) await new Promise((r) => setTimeout(r, 20));
    const victimPids = processesInUidRange(UID_BASE, UID_COUNT).map((p) => p.pid);
    expect(victimPids.length).toBeGreaterThan(0);
    const reader = await suite.backend.run({
      label: 'reader',
      workspace: workspace(),
      limits: { wallMs: 20_000 },
      argv: python(`
import os
found, pids = [], sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
for p in pids + ${JSON.stringify(victimPids)}:
    try:
        if b'${secret}' in open('/proc/%d/environ' % p, 'rb').read(): found.append(p)
    except OSError:
        pass
print('pids', pids, 'found', found)
`),
    });
    writeFileSync(join(ws, 'done'), '');
    expectNormal(await victim);
    expectNormal(reader);
    expect(reader.stdout).toMatch(/found \[\]/);
    // Its own namespace holds its supervisor (1) and itself: no other process at all.
    expect(reader.stdout).toMatch(/pids \[1, 2\]/);
  });

  it.skipIf(!isRoot())('runs each sandbox as a host uid of its own, as an unprivileged user inside', async () => {
    const spaces = [workspace(), workspace(), workspace()];
    const runs = Promise.all(
      spaces.map((ws, i) =>
        suite.backend.run({
          label: `uid-${i}`,
          workspace: ws,
          limits: { wallMs: 20_000 },
          argv: ['sh', '-c', 'id -u > started; while [ ! -e done ]; do sleep 0.05; done'],
        }),
      ),
    );
    while (!spaces.every((ws) => existsSync(join(ws, 'started')))) await new Promise((r) => setTimeout(r, 20));
    const uids = new Set(processesInUidRange(UID_BASE, UID_COUNT).map((p) => p.uid));
    spaces.forEach((ws) => writeFileSync(join(ws, 'done'), ''));
    for (const r of await runs) expectNormal(r);
    expect(uids.size).toBe(3);
    for (const ws of spaces) expect(readFileSync(join(ws, 'started'), 'utf8')).toBe('1000\n');
  });

  it('starts the setup command first, in the same sandbox, and ends as setup-failed when it fails', async () => {
    const ws = workspace();
    const ok = await suite.backend.run({
      label: 'setup-ok',
      workspace: ws,
      limits: { wallMs: 20_000 },
      setup: ['sh', '-c', `echo built > ${ws}/artifact; echo setup-output`],
      argv: ['cat', `${ws}/artifact`],
    });
    expectNormal(ok);
    expect(ok.stdout).toBe('setup-output\nbuilt\n');
    const bad = await suite.backend.run({
      label: 'setup-bad',
      workspace: ws,
      limits: { wallMs: 20_000 },
      setup: ['sh', '-c', 'echo "missing dependency" >&2; exit 3'],
      argv: ['sh', '-c', `touch ${ws}/should-not-exist`],
    });
    expect({ reason: bad.reason, detail: bad.detail, startMs: bad.startMs }).toEqual({
      reason: 'setup-failed',
      detail: 'the setup command exited with 3 (missing dependency)',
      startMs: null,
    });
    expect(existsSync(join(ws, 'should-not-exist'))).toBe(false);
  });

  it('a command that cannot be started is setup-failed, naming it', async () => {
    const r = await suite.backend.run({
      label: 'missing',
      workspace: workspace(),
      limits: { wallMs: 20_000 },
      argv: ['no-such-agent', '--x'],
    });
    expect({ reason: r.reason, detail: r.detail }).toEqual({
      reason: 'setup-failed',
      detail: 'cannot start the command: no-such-agent: No such file or directory',
    });
  });

  it.skipIf(!isRoot())('a workspace the sandbox uid cannot reach is setup-failed, saying why', async () => {
    const privateParent = mkdtempSync('/root/anvil-sandbox-private-'); // 0700, root's
    const ws = mkdtempSync(join(privateParent, 'ws-'));
    const r = await suite.backend.run({ label: 'unreachable', workspace: ws, limits: { wallMs: 20_000 }, argv: ['true'] });
    expect(r.reason).toBe('setup-failed');
    expect(r.detail).toContain(`the sandbox's uid cannot pass through ${privateParent} (mode 700)`);
    rmSync(privateParent, { recursive: true });
  });

  it('mounts readOnlyPaths read-only at the path given (a symlink resolved on the host)', async () => {
    const install = workspace();
    mkdirSync(join(install, 'bin'));
    const unreadable = await suite.backend.run({
      label: 'unreadable',
      workspace: workspace(),
      readOnlyPaths: [install],
      limits: { wallMs: 20_000 },
      argv: ['true'],
    });
    expect(unreadable.detail).toMatch(/cannot be mounted: the sandbox's uid cannot read .* \(mode 700\)/);
    chmodSync(install, 0o755);
    writeFileSync(
      join(install, 'bin', 'agent'),
      '#!/bin/sh\necho "agent from $0"; touch "$(dirname "$0")/written" 2>/dev/null || echo read-only\n',
      { mode: 0o755 },
    );
    const link = `${install}-link`;
    symlinkSync(install, link);
    const r = await suite.backend.run({
      label: 'installed-agent',
      workspace: workspace(),
      readOnlyPaths: [link],
      limits: { wallMs: 20_000 },
      argv: [join(link, 'bin', 'agent')],
    });
    expectNormal(r);
    expect(r.stdout).toBe(`agent from ${join(link, 'bin', 'agent')}\nread-only\n`);
    expect(existsSync(join(install, 'bin', 'written'))).toBe(false);
  });

  it('gives stdin from a text or a file', async () => {
    const ws = workspace();
    writeFileSync(join(ws, 'task.json'), '{"task": 1}');
    const text = await suite.backend.run({
      label: 'stdin-text',
      workspace: ws,
      limits: { wallMs: 20_000 },
      stdin: { text: 'hello' },
      argv: ['cat'],
    });
    const file = await suite.backend.run({
      label: 'stdin-file',
      workspace: ws,
      limits: { wallMs: 20_000 },
      stdin: { file: join(ws, 'task.json') },
      argv: ['cat'],
    });
    const none = await suite.backend.run({ label: 'stdin-none', workspace: ws, limits: { wallMs: 20_000 }, argv: ['cat'] });
    expect([text.stdout, file.stdout, none.stdout]).toEqual(['hello', '{"task": 1}', '']);
  });
});
