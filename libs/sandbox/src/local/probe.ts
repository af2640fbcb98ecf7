import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { SandboxUnavailableError } from '../errors';

const read = (p: string): string | null => {
  try {
    return readFileSync(p, 'utf8').trim();
  } catch {
    return null;
  }
};

/**
 * Starts one empty sandbox (new user, PID and network namespaces) as `uid` through bwrap, and
 * throws SandboxUnavailableError naming the kernel setting to change when it cannot. Run once
 * per backend, before any agent: a machine that cannot sandbox says so at start, instead of
 * failing every rollout (and never by running them unsandboxed).
 */
export function checkUserNamespaces(bwrap: string, uid: number | null): void {
  const args = [
    '--unshare-user',
    '--unshare-pid',
    '--unshare-net',
    '--die-with-parent',
    '--ro-bind',
    '/usr',
    '/usr',
    '--symlink',
    'usr/lib64',
    '/lib64',
    '--symlink',
    'usr/lib',
    '/lib',
    '--',
    '/usr/bin/true',
  ];
  // As the sandboxes run: bwrap itself as the unprivileged uid (spawn sets it, supplementary groups cleared).
  const as = uid !== null ? { uid, gid: uid } : {};
  const r = spawnSync(bwrap, args, { encoding: 'utf8', cwd: '/', timeout: 30_000, ...as });
  if (r.status === 0) return;
  const said = `${r.stderr ?? ''}${r.error ? r.error.message : ''}`.trim();
  const settings = [
    ['user.max_user_namespaces', read('/proc/sys/user/max_user_namespaces')],
    ['kernel.unprivileged_userns_clone', read('/proc/sys/kernel/unprivileged_userns_clone')],
    ['kernel.apparmor_restrict_unprivileged_userns', read('/proc/sys/kernel/apparmor_restrict_unprivileged_userns')],
  ]
    .filter(([, v]) => v !== null)
    .map(([k, v]) => `${k} = ${v}`);
  throw new SandboxUnavailableError(
    `the local sandbox cannot start here: bwrap could not create user, PID and network namespaces${uid !== null ? ` as uid ${uid}` : ''} (${said || `exit ${r.status}`}). ` +
      `This kernel's settings: ${settings.join(', ') || 'none readable'}. ` +
      'To allow them: sysctl -w user.max_user_namespaces=15000 when it is 0; sysctl -w kernel.unprivileged_userns_clone=1 (Debian before 11); ' +
      'sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap (Ubuntu 23.10 and later); ' +
      'in a container, a seccomp profile that allows unshare/clone with CLONE_NEWUSER (e.g. docker run --security-opt seccomp=unconfined). ' +
      "Or run trusted agents with the 'none' backend, which is not a sandbox.",
  );
}

export interface CgroupSupport {
  /** 'cgroup-v2': memory and pids controllers delegated to us; 'rlimits': per-process limits only. */
  mode: 'cgroup-v2' | 'rlimits';
  why: string;
}

/**
 * Whether limits could be enforced for a sandbox as a whole through cgroup v2: a unified hierarchy
 * at /sys/fs/cgroup whose root (our cgroup, when delegated) offers the memory and pids
 * controllers. A hybrid v1 setup (v2 mounted at /sys/fs/cgroup/unified beside v1 controllers)
 * does not: the controllers are bound to v1.
 */
export function detectCgroups(root = '/sys/fs/cgroup'): CgroupSupport {
  const own = read('/proc/self/cgroup')
    ?.split('\n')
    .find((l) => l.startsWith('0::'))
    ?.slice(3);
  const controllers = read(`${root}/cgroup.controllers`);
  if (controllers === null) {
    const hybrid = read(`${root}/unified/cgroup.controllers`);
    return {
      mode: 'rlimits',
      why: hybrid !== null ? `cgroup v1 (v2 only at ${root}/unified, controllers: ${hybrid || 'none'})` : 'no cgroup v2 hierarchy',
    };
  }
  const here = own && own !== '/' ? read(`${root}${own}/cgroup.controllers`) : controllers;
  const list = (here ?? '').split(/\s+/);
  const missing = ['memory', 'pids'].filter((c) => !list.includes(c));
  return missing.length === 0
    ? { mode: 'cgroup-v2', why: `cgroup v2 with ${list.join(' ')}` }
    : { mode: 'rlimits', why: `cgroup v2 without ${missing.join(' and ')} here` };
}
