import { realpath, stat } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';
import { SandboxSpecError } from './errors';
import { SESSION_ENV, type SandboxLimits, type SandboxSpec } from './types';

const MiB = 1024 * 1024;

export type ResolvedLimits = Required<Pick<SandboxLimits, 'wallMs' | 'killGraceMs' | 'tmpfsBytes' | 'stdoutBytes' | 'stderrBytes'>> &
  Pick<SandboxLimits, 'cpuSeconds' | 'memoryBytes' | 'processes' | 'fileSizeBytes' | 'outputBytes'>;

/** A host path and where it appears inside: at the path the spec names, its symlinks resolved on the host. */
export interface Mount {
  src: string;
  at: string;
}

/** A checked spec: the workspace resolved (symlinks followed), the defaults filled in. */
export interface ResolvedSpec extends Omit<SandboxSpec, 'limits' | 'env'> {
  env: Record<string, string>;
  limits: ResolvedLimits;
  /** The workspace's real path on the host; `workspaceAt` is where the program sees it (the path given). */
  workspace: string;
  workspaceAt: string;
  readOnlyMounts: Mount[];
}

/** The system the local backend mounts itself; a workspace or a read-only path may not sit on it. */
const RESERVED = ['/usr', '/bin', '/sbin', '/lib', '/lib64', '/etc', '/proc', '/dev', '/sys', '/run/anvil', '/home/agent'];

const positive = (v: unknown) => typeof v === 'number' && Number.isFinite(v) && v > 0;
const isStrings = (v: unknown): v is string[] => Array.isArray(v) && v.every((a) => typeof a === 'string' && !a.includes('\0'));
const within = (path: string, dir: string) => path === dir || path.startsWith(`${dir}/`);
const systemPath = (p: string) => p === '/' || RESERVED.some((r) => within(p, r) || within(r, p));

/** Checks a spec completely (every problem named at once) and fills in the defaults. */
export async function resolveSpec(spec: SandboxSpec): Promise<ResolvedSpec> {
  const label = typeof spec?.label === 'string' && spec.label.trim() !== '' ? spec.label : '(no label)';
  const problems: string[] = [];
  if (label === '(no label)') problems.push('label: a non-empty string naming the run is required');
  if (!isStrings(spec.argv) || spec.argv.length === 0 || spec.argv[0] === '')
    problems.push('argv: a non-empty list of strings is required');
  if (spec.setup !== undefined && (!isStrings(spec.setup) || spec.setup.length === 0 || spec.setup[0] === ''))
    problems.push('setup: when given, a non-empty list of strings');
  const workspace = await directory(spec.workspace, 'workspace', problems);
  const workspaceAt = typeof spec.workspace === 'string' ? resolve(spec.workspace) : '';
  if (spec.cwd !== undefined && (typeof spec.cwd !== 'string' || !isAbsolute(spec.cwd)))
    problems.push('cwd: an absolute path inside the sandbox');
  const env = spec.env ?? {};
  for (const [k, v] of Object.entries(env)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) problems.push(`env: ${JSON.stringify(k)} is not a variable name`);
    else if (typeof v !== 'string' || v.includes('\0')) problems.push(`env.${k}: a string without NUL bytes`);
  }
  if (spec.session) {
    const taken = SESSION_ENV.filter((k) => k in env);
    if (taken.length) problems.push(`env: ${taken.join(', ')} are set from the session; leave them out`);
    sessionProblems(spec.session, problems);
  }
  if (spec.stdin !== undefined) {
    if ('file' in spec.stdin) {
      const s = await stat(spec.stdin.file).catch(() => null);
      if (!s?.isFile()) problems.push(`stdin.file: ${spec.stdin.file} is not a regular file`);
    } else if (typeof (spec.stdin as { text?: unknown }).text !== 'string') problems.push('stdin: { text } or { file }');
  }
  const readOnlyMounts: Mount[] = [];
  for (const p of spec.readOnlyPaths ?? []) {
    if (typeof p !== 'string' || !isAbsolute(p)) problems.push(`readOnlyPaths: ${JSON.stringify(p)} is not an absolute path`);
    else {
      const real = await realpath(p).catch(() => null);
      if (!real) problems.push(`readOnlyPaths: ${p} does not exist`);
      else if (systemPath(real) || systemPath(resolve(p))) problems.push(`readOnlyPaths: ${p} overlaps the sandbox's own system mounts`);
      else readOnlyMounts.push({ src: real, at: resolve(p) });
    }
  }
  const limits = limitsOf(spec.limits, problems);
  if (workspace && systemPath(workspaceAt))
    problems.push(`workspace: ${spec.workspace} is (or holds) a system directory the sandbox mounts read-only`);
  if (problems.length || !workspace || !limits) throw new SandboxSpecError(label, problems);
  return { ...spec, workspace, workspaceAt, env, readOnlyMounts, limits };
}

async function directory(p: unknown, name: string, problems: string[]): Promise<string | null> {
  if (typeof p !== 'string' || !isAbsolute(p)) {
    problems.push(`${name}: an absolute host path is required`);
    return null;
  }
  const real = await realpath(p).catch(() => null);
  const s = real ? await stat(real).catch(() => null) : null;
  if (!real || !s?.isDirectory()) {
    problems.push(`${name}: ${p} is not an existing directory`);
    return null;
  }
  if (systemPath(real)) {
    problems.push(`${name}: ${p} is (or holds) a system directory the sandbox mounts read-only`);
    return null;
  }
  return real;
}

function sessionProblems(session: { baseUrl: unknown; apiKey: unknown }, problems: string[]): void {
  let url: URL | null = null;
  try {
    url = new URL(String(session.baseUrl));
  } catch {
    /* reported below */
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:'))
    problems.push(`session.baseUrl: ${JSON.stringify(session.baseUrl)} is not an http(s) URL`);
  else if (!/^\/sessions\/[^/]+\/v1\/?$/.test(url.pathname) || url.search !== '' || url.username !== '')
    problems.push(`session.baseUrl: expected the session's own URL, http://<gateway>/sessions/<key>/v1 (got ${url.pathname})`);
  if (typeof session.apiKey !== 'string' || session.apiKey.trim() === '' || /[\s\0]/.test(session.apiKey))
    problems.push('session.apiKey: the session key is required');
}

function limitsOf(limits: SandboxLimits | undefined, problems: string[]): ResolvedLimits | null {
  if (!limits || typeof limits !== 'object') {
    problems.push('limits: required (at least wallMs)');
    return null;
  }
  if (!positive(limits.wallMs)) problems.push('limits.wallMs: a positive number of milliseconds is required');
  const optional = [
    'killGraceMs',
    'cpuSeconds',
    'memoryBytes',
    'processes',
    'fileSizeBytes',
    'tmpfsBytes',
    'stdoutBytes',
    'stderrBytes',
    'outputBytes',
  ] as const;
  for (const k of optional) {
    const v = limits[k];
    if (v !== undefined && !(positive(v) && Number.isInteger(v))) problems.push(`limits.${k}: a positive integer when given`);
  }
  return {
    ...limits,
    killGraceMs: limits.killGraceMs ?? 1000,
    tmpfsBytes: limits.tmpfsBytes ?? 512 * MiB,
    stdoutBytes: limits.stdoutBytes ?? MiB,
    stderrBytes: limits.stderrBytes ?? MiB,
  };
}

/** The supervisor's --rlimit arguments for a spec's limits (core dumps are always off). */
export function rlimitArgs(limits: ResolvedLimits): string[] {
  const out = ['--rlimit', 'core=0'];
  if (limits.cpuSeconds) out.push('--rlimit', `cpu=${limits.cpuSeconds}`);
  if (limits.memoryBytes) out.push('--rlimit', `data=${limits.memoryBytes}`);
  if (limits.processes) out.push('--rlimit', `nproc=${limits.processes}`);
  if (limits.fileSizeBytes) out.push('--rlimit', `fsize=${limits.fileSizeBytes}`);
  return out;
}
