// The none backend: no isolation, but the same interface and what it can enforce without
// namespaces — the wall clock, the stop sequence, rlimits, output caps, the session relay, and
// no process left behind (the supervisor adopts orphans).
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { alive, CHAT_CALL, expectNormal, python, removeWorkspaces, workspace } from '../testing/harness';
import { startRecordingGateway, type RecordingGateway } from '../testing/recording-gateway';
import { PLACEHOLDER_KEY } from '../types';
import { NoneSandbox } from './none-backend';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const warnings: string[] = [];
const infos: string[] = [];
const logger = { info: (msg: string) => void infos.push(msg), warn: (msg: string) => void warnings.push(msg) };
const pidsIn = (ws: string) =>
  ['main.pid', 'child.pid', 'grandchild.pid'].filter((f) => existsSync(join(ws, f))).map((f) => Number(readFileSync(join(ws, f), 'utf8')));

let backend: NoneSandbox;
let gateway: RecordingGateway;
beforeAll(async () => {
  backend = await NoneSandbox.create({ logger });
  gateway = await startRecordingGateway();
});
afterAll(async () => {
  await gateway?.close();
  removeWorkspaces();
});

describe('none backend', () => {
  it('says in the log that it is unsandboxed', () => {
    expect(warnings.join('\n')).toContain('sandbox none: programs run UNSANDBOXED');
  });

  it("relays the session's API like the local backend (the host network stays reachable: it is not a sandbox)", async () => {
    const session = gateway.session();
    const ws = workspace();
    const r = await backend.run({
      label: 'none-calls',
      workspace: ws,
      session,
      limits: { wallMs: 20_000 },
      argv: python(`${CHAT_CALL}
import os, socket, urllib.request, urllib.error
print('key', os.environ['OPENAI_API_KEY'], 'home', os.environ['HOME'] != '${ws}', 'cwd', os.getcwd())
try:
    urllib.request.urlopen(os.environ['OPENAI_BASE_URL'].replace('/v1', '/admin/v1/sessions'))
except urllib.error.HTTPError as e:
    print('admin', e.code)
socket.create_connection(('127.0.0.1', ${gateway.port}), timeout=3); print('host port reachable')
`),
    });
    expectNormal(r);
    expect(r.stdout).toContain(`answered on /sessions/${session.apiKey}/v1/chat/completions`);
    expect(r.stdout).toContain(`key ${PLACEHOLDER_KEY} home True cwd ${ws}`);
    expect(r.stdout).toContain('admin 403');
    expect(r.stdout).toContain('host port reachable');
    expect(gateway.requestsOf(session.apiKey)[0].headers.authorization).toBe(`Bearer ${session.apiKey}`);
    expect(r.relay.refused).toBe(1);
  });

  it('stops a program that ignores SIGTERM after the grace, and its children with it', async () => {
    const ws = workspace();
    const r = await backend.run({
      label: 'none-stubborn',
      workspace: ws,
      limits: { wallMs: 800, killGraceMs: 400 },
      argv: [
        'sh',
        '-c',
        `trap '' TERM; (trap '' TERM; echo $$ > child.pid; sleep 1000) & echo $$ > main.pid; while true; do sleep 0.1; done`,
      ],
    });
    expect(r.reason).toBe('timeout');
    expect(r.wallMs).toBeLessThan(4000);
    expect(infos).toContain('sandbox none: none-stubborn ended: timeout (the wall clock (800 ms) ran out)');
    const pids = pidsIn(ws);
    expect(pids.length).toBe(2);
    expect(pids.filter(alive)).toEqual([]);
  });

  it('leaves no orphan behind (setsid, double fork, SIGTERM ignored, holding stdout), and ends at once', async () => {
    const ws = workspace();
    const r = await backend.run({
      label: 'none-orphans',
      workspace: ws,
      limits: { wallMs: 20_000 },
      argv: [
        'sh',
        '-c',
        `setsid sh -c "trap '' TERM HUP; echo \\$\\$ > child.pid; exec sleep 1000" &
         (sh -c "trap '' TERM; sleep 1000 & echo \\$! > grandchild.pid" &)
         echo $$ > main.pid; sleep 0.2; echo started`,
      ],
    });
    expectNormal(r);
    expect(r.wallMs).toBeLessThan(5000);
    const pids = pidsIn(ws);
    expect(pids.length).toBe(3);
    expect(pids.filter(alive)).toEqual([]);
  });

  it('enforces the rlimits it can: CPU seconds and file size', async () => {
    const ws = workspace();
    const cpu = await backend.run({
      label: 'none-cpu',
      workspace: ws,
      limits: { wallMs: 30_000, cpuSeconds: 1 },
      argv: python('while True: pass'),
    });
    expect({ reason: cpu.reason, limit: cpu.limit }).toEqual({ reason: 'limit', limit: 'cpu' });
    const file = await backend.run({
      label: 'none-fsize',
      workspace: ws,
      limits: { wallMs: 30_000, fileSizeBytes: 65536 },
      argv: ['dd', 'if=/dev/zero', `of=${join(ws, 'big')}`, 'bs=64K', 'count=4'],
    });
    expect({ reason: file.reason, limit: file.limit }).toEqual({ reason: 'limit', limit: 'file-size' });
  });

  it('kills everything the program started when the host process dies; the next host removes its private dirs', async () => {
    const ws = workspace();
    const host = spawn(process.execPath, ['--import', 'tsx', resolve(__dirname, '../testing/host-that-dies.ts'), ws], {
      env: { ...process.env, SANDBOX_TEST_BACKEND: 'none' },
      stdio: 'ignore',
    });
    for (let i = 0; i < 600 && !existsSync(join(ws, 'started')); i++) await sleep(50);
    const pids = pidsIn(ws);
    expect(pids.length).toBe(2);
    expect(pids.filter(alive)).toEqual(pids);
    const privateDirs = () => readdirSync(tmpdir()).filter((n) => n.startsWith(`anvil-none-${host.pid}-`));
    expect(privateDirs().length).toBe(1);
    host.kill('SIGKILL');
    for (let i = 0; i < 100 && pids.some(alive); i++) await sleep(50);
    expect(pids.filter(alive)).toEqual([]);
    // Its private HOME and TMPDIR are left; the next host to start removes them.
    await NoneSandbox.create({ logger });
    expect(privateDirs()).toEqual([]);
  });
});
