import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SandboxUnavailableError } from '../errors';
import { checkUserNamespaces, detectCgroups } from './probe';

const trees: string[] = [];
afterAll(() => trees.forEach((t) => rmSync(t, { recursive: true, force: true })));

function cgroupTree(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'anvil-cgroup-'));
  trees.push(root);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(root, path, '..'), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

describe('detectCgroups', () => {
  it('a hybrid v1 machine (this kind of host) gets rlimits, and says why', () => {
    const root = cgroupTree({ 'unified/cgroup.controllers': 'hugetlb\n' });
    expect(detectCgroups(root)).toEqual({ mode: 'rlimits', why: `cgroup v1 (v2 only at ${root}/unified, controllers: hugetlb)` });
  });

  it('a unified hierarchy without the memory or pids controller gets rlimits', () => {
    const root = cgroupTree({ 'cgroup.controllers': 'cpu io\n' });
    expect(detectCgroups(root).mode).toBe('rlimits');
  });

  it('a unified hierarchy with memory and pids reports cgroup v2', () => {
    const root = cgroupTree({ 'cgroup.controllers': 'cpuset cpu io memory pids\n' });
    expect(detectCgroups(root).mode).toBe('cgroup-v2');
  });
});

describe('checkUserNamespaces', () => {
  it('passes on this machine, as an unprivileged uid when root, as the sandboxes run (the local tests depend on it)', () => {
    expect(() => checkUserNamespaces('/usr/bin/bwrap', process.getuid?.() === 0 ? 1_900_080_000 : null)).not.toThrow();
  });

  it('a bwrap that cannot build namespaces is a clear error naming the kernel settings to change', () => {
    let err: unknown;
    try {
      // A program that fails the way a bwrap refused by the kernel does.
      checkUserNamespaces('/bin/false', null);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxUnavailableError);
    const msg = (err as Error).message;
    expect(msg).toContain('the local sandbox cannot start here');
    expect(msg).toContain('user.max_user_namespaces = ');
    expect(msg).toContain('kernel.apparmor_restrict_unprivileged_userns=0');
    expect(msg).toContain("the 'none' backend, which is not a sandbox");
  });
});
