import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { LocalSandbox } from '../local/local-backend';
import type { SandboxBackend, SandboxLogger, SandboxResult, SandboxSpec } from '../types';
import { startRecordingGateway, type RecordingGateway } from './recording-gateway';

const made: string[] = [];

/** A fresh workspace under the temp dir (which every sandbox uid may traverse); removeWorkspaces() deletes them. */
export function workspace(): string {
  const dir = mkdtempSync(join(tmpdir(), 'anvil-sandbox-test-'));
  made.push(dir);
  return dir;
}

export function removeWorkspaces(): void {
  for (const dir of made.splice(0)) {
    rmSync(dir, { recursive: true, force: true });
    rmSync(`${dir}-link`, { force: true });
  }
}

export const isRoot = (): boolean => process.getuid?.() === 0;

/** Live processes whose real uid lies in [base, base + count): what sandboxes of that range still run. */
export function processesInUidRange(base: number, count: number): Array<{ pid: number; uid: number; cmd: string }> {
  const out: Array<{ pid: number; uid: number; cmd: string }> = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const status = readFileSync(`/proc/${e}/status`, 'utf8');
      const uid = Number(/\nUid:\t(\d+)/.exec(status)?.[1]);
      const state = /\nState:\t(\S)/.exec(status)?.[1];
      if (uid >= base && uid < base + count && state !== 'Z')
        out.push({ pid: Number(e), uid, cmd: readFileSync(`/proc/${e}/cmdline`, 'utf8') });
    } catch {
      /* exited meanwhile */
    }
  }
  return out;
}

/** Whether `pid` still runs (zombies awaiting their reaper do not). */
export function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !['Z', 'X'].includes(stat[stat.lastIndexOf(')') + 2]);
  } catch {
    return false;
  }
}

/** A Python program as argv (python3 from the system, which every sandbox mounts). */
export const python = (code: string): string[] => ['python3', '-c', code];

/** A Python agent: one chat call through its session, printing the answer. */
export const CHAT_CALL = `
import json, os, urllib.request
req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions',
    data=json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'hi'}]}).encode(),
    headers={'content-type': 'application/json', 'authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})
print(json.load(urllib.request.urlopen(req, timeout=20))['choices'][0]['message']['content'])
`;

/**
 * Runs `fn` (the test's misbehaving sandbox) with a well-behaved sandbox beside it — one chat
 * call, then a pause so their lives overlap — and checks that the neighbour finished normally
 * and its call reached its own session.
 */
export async function besideNeighbour<T>(
  backend: SandboxBackend,
  gateway: RecordingGateway,
  fn: () => Promise<T>,
  neighbourSpec: Partial<SandboxSpec> = {},
): Promise<T> {
  const session = gateway.session();
  const neighbour = backend.run({
    label: 'neighbour',
    argv: python(`${CHAT_CALL}\nimport time; time.sleep(0.5); print('neighbour done')`),
    workspace: workspace(),
    session,
    limits: { wallMs: 30_000 },
    ...neighbourSpec,
  });
  const [mine, theirs] = await Promise.all([fn(), neighbour]);
  expectNormal(theirs);
  expect(theirs.stdout).toContain('neighbour done');
  expect(gateway.requestsOf(session.apiKey).map((r) => r.url)).toEqual([`/sessions/${session.apiKey}/v1/chat/completions`]);
  return mine;
}

export function expectNormal(r: SandboxResult): void {
  expect({ reason: r.reason, exitCode: r.exitCode, detail: r.detail, stderr: r.stderr.slice(-2000) }).toEqual({
    reason: 'exit',
    exitCode: 0,
    detail: '',
    stderr: r.stderr.slice(-2000),
  });
}

export const quiet: SandboxLogger = { info: () => undefined, warn: () => undefined };

/**
 * A test file's local backend on a uid range of its own, and a recording gateway; after each test,
 * no process of that range may be left (the promise every test of a sandbox checks).
 */
export function localSandboxSuite(uidBase: number, uidCount = 64): { backend: LocalSandbox; gateway: RecordingGateway } {
  const ctx = {} as { backend: LocalSandbox; gateway: RecordingGateway };
  beforeAll(async () => {
    ctx.backend = await LocalSandbox.create({ uidBase, uidCount, logger: quiet });
    ctx.gateway = await startRecordingGateway();
  });
  afterAll(async () => {
    await ctx.gateway?.close();
    removeWorkspaces();
  });
  afterEach(() => expect(processesInUidRange(uidBase, uidCount)).toEqual([]));
  return ctx;
}
