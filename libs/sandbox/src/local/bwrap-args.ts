import { existsSync, lstatSync, readlinkSync } from 'node:fs';
import type { ResolvedSpec } from '../spec';
import { rlimitArgs } from '../spec';

/** Inside every local sandbox. */
export const SANDBOX_UID = 1000;
export const SANDBOX_HOME = '/home/agent';
export const RUNTIME_MOUNT = '/run/anvil';
export const INIT_MOUNT = '/run/anvil-init';
export const RELAY_PORT = 8080;
export const GATEWAY_SOCKET = 'gateway.sock';

/**
 * The /etc files a program needs and that say nothing about the host: the dynamic linker's cache,
 * TLS roots, alternatives (Debian's /usr/bin/python3-style links), time zone, name-service
 * configuration. No resolv.conf (there is no network to resolve on), no passwd/group/hosts of
 * the host (the sandbox gets its own), nothing else.
 */
const ETC = [
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'ssl',
  'ca-certificates',
  'ca-certificates.conf',
  'pki',
  'crypto-policies',
  'alternatives',
  'localtime',
  'timezone',
  'nsswitch.conf',
  'host.conf',
  'gai.conf',
  'protocols',
  'services',
  'mime.types',
];

/** The merged-/usr links (or the real directories on a system without them). */
const ROOT_DIRS = ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32'];

export interface BwrapPlan {
  spec: ResolvedSpec;
  /** Host directory mounted read-only at RUNTIME_MOUNT: passwd, group, hosts, the relay's socket. */
  runtimeDir: string;
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
  for (const f of ETC) if (existsSync(`/etc/${f}`)) a.push('--ro-bind', `/etc/${f}`, `/etc/${f}`);
  for (const f of ['passwd', 'group', 'hosts']) a.push('--ro-bind', `${plan.runtimeDir}/${f}`, `/etc/${f}`);
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

/** The sandbox's own /etc/passwd, /etc/group and /etc/hosts. */
export function etcFiles(): Record<'passwd' | 'group' | 'hosts', string> {
  return {
    passwd:
      'root:x:0:0:root:/root:/usr/sbin/nologin\n' +
      `agent:x:${SANDBOX_UID}:${SANDBOX_UID}:agent:${SANDBOX_HOME}:/bin/sh\n` +
      'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n',
    group: `root:x:0:\nagent:x:${SANDBOX_UID}:\nnogroup:x:65534:\n`,
    hosts: '127.0.0.1\tlocalhost anvil-sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n',
  };
}
