import { lstatSync, readlinkSync } from 'node:fs';
import type { ResolvedSpec } from '../spec';
import { rlimitArgs } from '../spec';
import { SANDBOX_HOME, SANDBOX_UID } from './sandbox-etc';

export { SANDBOX_HOME, SANDBOX_UID } from './sandbox-etc';

/** Inside every local sandbox. */
export const RUNTIME_MOUNT = '/run/anvil';
export const INIT_MOUNT = '/run/anvil-init';
export const RELAY_PORT = 8080;
export const GATEWAY_SOCKET = 'gateway.sock';

/** The merged-/usr links (or the real directories on a system without them). */
const ROOT_DIRS = ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32'];

export interface BwrapPlan {
  spec: ResolvedSpec;
  /** Host directory mounted read-only at RUNTIME_MOUNT: the relay's socket. */
  runtimeDir: string;
  /** The prepared /etc (SandboxEtc): the host's harmless entries and the sandbox's own passwd, group and hosts. */
  etcDir: string;
  /** The supervisor binary on the host. */
  init: string;
  cwd: string;
}

/** bwrap's arguments, the supervisor's and the program's, in mount order (later mounts go on top). */
export function bwrapArgs(plan: BwrapPlan): string[] {
  const { spec } = plan;
  const a = [
    '--unshare-user',
    '--uid',
    String(SANDBOX_UID),
    '--gid',
    String(SANDBOX_UID),
    '--disable-userns',
    '--unshare-pid',
    '--unshare-net',
    '--unshare-ipc',
    '--unshare-uts',
    '--unshare-cgroup-try',
    '--hostname',
    'anvil-sandbox',
    '--die-with-parent',
    '--as-pid-1',
    '--new-session',
    '--ro-bind',
    '/usr',
    '/usr',
  ];
  for (const d of ROOT_DIRS) {
    const host = `/${d}`;
    let st;
    try {
      st = lstatSync(host);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) a.push('--symlink', readlinkSync(host), host);
    else if (st.isDirectory()) a.push('--ro-bind', host, host);
  }
  a.push('--ro-bind', plan.etcDir, '/etc');
  const size = String(spec.limits.tmpfsBytes);
  a.push('--proc', '/proc', '--dev', '/dev', '--size', size, '--tmpfs', '/dev/shm');
  a.push('--size', size, '--tmpfs', '/tmp', '--size', size, '--tmpfs', SANDBOX_HOME);
  a.push('--bind', spec.workspace, spec.workspaceAt);
  for (const m of spec.readOnlyMounts) a.push('--ro-bind', m.src, m.at);
  a.push('--ro-bind', plan.runtimeDir, RUNTIME_MOUNT, '--ro-bind', plan.init, INIT_MOUNT);
  // bwrap builds the tree on a tmpfs the sandbox's user owns: once built, it and /dev are made
  // read-only (not recursively: /tmp, $HOME, /dev/shm and the workspace stay writable).
  a.push('--remount-ro', '/dev', '--remount-ro', '/');
  a.push('--info-fd', '4', '--chdir', plan.cwd, '--', INIT_MOUNT, '--info-fd', '3');
  if (spec.session) a.push('--listen', String(RELAY_PORT), '--connect', `${RUNTIME_MOUNT}/${GATEWAY_SOCKET}`);
  if (spec.setup) a.push('--setup', String(spec.setup.length));
  a.push(...rlimitArgs(spec.limits), '--', ...(spec.setup ?? []), ...spec.argv);
  return a;
}
