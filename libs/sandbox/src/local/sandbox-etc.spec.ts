import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readlinkSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { removeWorkspaces, workspace } from '../testing/harness';
import { SandboxEtc } from './sandbox-etc';

afterAll(removeWorkspaces);
const temp = workspace;

/** A host /etc with a file, a symlink, a directory of CA links and a private directory, and things that must not be copied. */
function hostEtc(): string {
  const etc = temp();
  writeFileSync(join(etc, 'nsswitch.conf'), 'hosts: files\n');
  symlinkSync('/usr/share/zoneinfo/Etc/UTC', join(etc, 'localtime'));
  mkdirSync(join(etc, 'ssl', 'certs'), { recursive: true });
  symlinkSync('/usr/share/ca-certificates/x.crt', join(etc, 'ssl', 'certs', 'x.pem'));
  mkdirSync(join(etc, 'ssl', 'private'));
  writeFileSync(join(etc, 'ssl', 'private', 'host.key'), 'secret');
  chmodSync(join(etc, 'ssl', 'private'), 0o700);
  writeFileSync(join(etc, 'shadow'), 'root:*:');
  writeFileSync(join(etc, 'resolv.conf'), 'nameserver 10.0.0.1\n');
  writeFileSync(join(etc, 'passwd'), 'host-user:x:1234:1234::/home/host-user:/bin/bash\n');
  return etc;
}

describe('SandboxEtc', () => {
  it("copies the harmless entries (symlinks as they are), the sandbox's own passwd, group and hosts, and nothing else", () => {
    const etc = new SandboxEtc(temp(), 'run-', hostEtc());
    const dir = etc.current();
    expect((statSync(dir).mode & 0o777).toString(8)).toBe('755');
    expect(readFileSync(join(dir, 'nsswitch.conf'), 'utf8')).toBe('hosts: files\n');
    expect(readlinkSync(join(dir, 'localtime'))).toBe('/usr/share/zoneinfo/Etc/UTC');
    expect(readlinkSync(join(dir, 'ssl', 'certs', 'x.pem'))).toBe('/usr/share/ca-certificates/x.crt');
    expect(existsSync(join(dir, 'ssl', 'private')), 'what the sandbox could not read on the host').toBe(false);
    for (const f of ['shadow', 'resolv.conf']) expect(existsSync(join(dir, f)), f).toBe(false);
    expect(readFileSync(join(dir, 'passwd'), 'utf8')).toMatch(/^root:.*\nagent:x:1000:1000:/);
    expect(readFileSync(join(dir, 'passwd'), 'utf8')).not.toContain('host-user');
    expect(existsSync(join(dir, 'group')) && existsSync(join(dir, 'hosts'))).toBe(true);
  });

  it('is reused while the host entries are unchanged, and made again when one changes (a CA added below ssl/certs)', () => {
    const host = hostEtc();
    const etc = new SandboxEtc(temp(), 'run-', host);
    const t0 = Date.now();
    const first = etc.current(t0);
    expect(etc.current(t0 + 2000)).toBe(first);
    writeFileSync(join(host, 'ssl', 'certs', 'new.pem'), 'cert');
    utimesSync(join(host, 'ssl', 'certs'), new Date(), new Date(Date.now() + 5000));
    expect(etc.current(t0 + 2500), 'checked at most once a second').toBe(first);
    const second = etc.current(t0 + 4000);
    expect(second).not.toBe(first);
    expect(existsSync(join(second, 'ssl', 'certs', 'new.pem'))).toBe(true);
    // The replaced copy stays for sandboxes that were handed it and have not mounted it yet.
    expect(lstatSync(first).isDirectory()).toBe(true);
    etc.removeRetired();
    expect(existsSync(first)).toBe(false);
    expect(existsSync(second)).toBe(true);
  });

  it('is one per runtime directory in a process, however many backends share it', () => {
    const base = temp();
    expect(SandboxEtc.shared(base, 'run-')).toBe(SandboxEtc.shared(base, 'run-'));
    expect(SandboxEtc.shared(base, 'run-')).not.toBe(SandboxEtc.shared(temp(), 'run-'));
  });

  it('is named for its host process, so a dead host’s copy is cleaned up with its run directories', () => {
    const base = temp();
    const dir = new SandboxEtc(base, 'run-', hostEtc()).current();
    expect(dir.startsWith(join(base, `run-${process.pid}-etc-`))).toBe(true);
  });
});
