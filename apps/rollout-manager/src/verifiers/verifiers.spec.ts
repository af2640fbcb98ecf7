import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChainAddEnvironment, chainAddTask } from '../environments/chain-add';
import { Sandboxes } from '../sandbox/sandboxes';
import { verifierSpecSchema } from '../tasks/task-set';
import { checkVerifier, runVerifier, UnknownVerifierError, VerifierError, type VerifierDeps } from './verifiers';

const task = { ...chainAddTask([12, 7, 30]), data: { operands: [12, 7, 30], total: 49, answer: 49 } };
const input = { task, transcript: { messages: [...task.messages, { role: 'assistant' as const, content: '49' }], finalAnswer: '49' } };
const deps: VerifierDeps = {
  environments: new Map([['chain-add', new ChainAddEnvironment()]]),
  functions: {
    half: () => ({ outcomeReward: 0.5, success: false }),
    throws: () => {
      throw new Error('boom');
    },
    hangs: () => new Promise(() => undefined),
    garbage: () => ({ outcomeReward: Number.NaN }) as never,
  },
  // Command verifiers run in real sandboxes, on a uid range of this file's own.
  sandboxes: new Sandboxes({ info: () => undefined, warn: () => undefined }, { uidBase: 1_800_200_100, uidCount: 16 }),
  repoRoot: process.cwd(),
};
const spec = (v: unknown) => verifierSpecSchema.parse(v);
const commandSpec = (v: Record<string, unknown>) => {
  const s = spec({ kind: 'command', ...v });
  if (s.kind !== 'command') throw new Error('unreachable');
  return s;
};

describe('verifiers', () => {
  let server: Server;
  let url = '';
  let flaky = 0;
  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        const { transcript } = JSON.parse(body) as { transcript: { finalAnswer: string } };
        if (req.url === '/ok')
          return res.end(JSON.stringify({ outcomeReward: transcript.finalAnswer === '49' ? 1 : 0, processRewards: [1] }));
        if (req.url === '/flaky')
          return flaky++ < 2 ? ((res.statusCode = 503), res.end('busy')) : res.end(JSON.stringify({ outcomeReward: 0.25 }));
        if (req.url === '/garbage') return res.end('<html>');
        if (req.url === '/hang') return;
        res.statusCode = 404;
        res.end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(
    () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  );

  it('environment and TypeScript function verifiers', async () => {
    expect(await runVerifier(spec({ kind: 'env' }), 'chain-add', input, deps)).toMatchObject({ outcomeReward: 0.8, success: true });
    expect(await runVerifier(spec({ kind: 'function', name: 'final-answer' }), null, input, deps)).toMatchObject({
      outcomeReward: 1,
      success: true,
    });
    expect(await runVerifier(spec({ kind: 'function', name: 'half' }), null, input, deps)).toMatchObject({
      outcomeReward: 0.5,
      success: false,
    });
  });

  it('a verifier that throws, hangs or answers garbage fails within its bound as VerifierError', async () => {
    await expect(runVerifier(spec({ kind: 'function', name: 'throws' }), null, input, deps)).rejects.toThrow(VerifierError);
    const t0 = performance.now();
    await expect(runVerifier(spec({ kind: 'function', name: 'hangs', timeoutMs: 200 }), null, input, deps)).rejects.toThrow(
      /within 200 ms/,
    );
    expect(performance.now() - t0).toBeLessThan(2000);
    await expect(runVerifier(spec({ kind: 'function', name: 'garbage' }), null, input, deps)).rejects.toThrow(/garbage: outcomeReward/);
  });

  it('HTTP reward service: answer, retries on 5xx, garbage, hang', async () => {
    expect(await runVerifier(spec({ kind: 'http', url: `${url}/ok` }), null, input, deps)).toMatchObject({
      outcomeReward: 1,
      processRewards: [1],
    });
    expect(await runVerifier(spec({ kind: 'http', url: `${url}/flaky`, retries: 2 }), null, input, deps)).toMatchObject({
      outcomeReward: 0.25,
    });
    await expect(runVerifier(spec({ kind: 'http', url: `${url}/garbage`, retries: 0 }), null, input, deps)).rejects.toThrow(/garbage/);
    const t0 = performance.now();
    await expect(runVerifier(spec({ kind: 'http', url: `${url}/hang`, timeoutMs: 150, retries: 1 }), null, input, deps)).rejects.toThrow(
      /2 attempts failed \(last: no answer within 150 ms\)/,
    );
    expect(performance.now() - t0).toBeLessThan(3000);
  });

  it('command verifier: JSON on stdout or exit code; hang killed, garbage refused', async () => {
    const json = spec({
      kind: 'command',
      command: [
        'node',
        '-e',
        'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const i=JSON.parse(s);console.log("log line");console.log(JSON.stringify({outcomeReward:i.transcript.finalAnswer==="49"?1:0}))})',
      ],
    });
    expect(await runVerifier(json, null, input, deps)).toMatchObject({ outcomeReward: 1, success: true });
    expect(
      await runVerifier(spec({ kind: 'command', command: ['sh', '-c', 'cat >/dev/null; exit 0'], mode: 'exit-code' }), null, input, deps),
    ).toMatchObject({ outcomeReward: 1 });
    expect(
      await runVerifier(spec({ kind: 'command', command: ['sh', '-c', 'cat >/dev/null; exit 1'], mode: 'exit-code' }), null, input, deps),
    ).toMatchObject({ outcomeReward: 0, success: false });
    await expect(runVerifier(spec({ kind: 'command', command: ['sh', '-c', 'echo not-json'] }), null, input, deps)).rejects.toThrow(
      /garbage/,
    );
    const t0 = performance.now();
    await expect(
      runVerifier(spec({ kind: 'command', command: ['sh', '-c', 'sleep 30'], timeoutMs: 200 }), null, input, deps),
    ).rejects.toThrow(/within 200 ms/);
    expect(performance.now() - t0).toBeLessThan(3000);
  });

  it('command verifier: sandboxed (its read-only paths, the agent’s workspace, nothing else of the host); none runs on the host', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rm-verifier-'));
    const workspace = mkdtempSync(join(tmpdir(), 'rm-verifier-ws-'));
    chmodSync(dir, 0o755);
    try {
      writeFileSync(join(dir, 'score.sh'), 'cat >/dev/null; cat "$1"; id -u >&2; test -e /root && exit 9; echo {\\"outcomeReward\\":1}\n');
      writeFileSync(join(workspace, 'left-by-agent'), 'agent output\n');
      const withWorkspace = { ...input, agent: { exitCode: 0, stdout: '', stderr: '', answerFile: null, workspace } };
      const local = commandSpec({
        command: ['sh', join(dir, 'score.sh'), join(workspace, 'left-by-agent')],
        readOnlyPaths: [dir],
      });
      expect(await runVerifier(local, null, withWorkspace, deps)).toMatchObject({ outcomeReward: 1 });
      // Without its read-only path the script is not there.
      await expect(runVerifier({ ...local, readOnlyPaths: [] }, null, withWorkspace, deps)).rejects.toThrow(
        /exited 2: .*score.sh: No such file/,
      );
      // Unsandboxed it sees the host (/root), as a trusted program may.
      await expect(runVerifier({ ...local, sandbox: 'none' }, null, withWorkspace, deps)).rejects.toThrow(/exited 9/);
      // It wrote in the workspace it was given, as the sandbox's uid, handed back to its owner afterwards.
      await runVerifier(
        spec({ kind: 'command', command: ['sh', '-c', 'cat >/dev/null; echo scored > mark'], mode: 'exit-code' }),
        null,
        withWorkspace,
        deps,
      );
      expect(readFileSync(join(workspace, 'mark'), 'utf8')).toBe('scored\n');
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(workspace, { recursive: true, force: true });
    }
  });

  it('unknown verifiers are refused by name at load', () => {
    expect(() => checkVerifier(spec({ kind: 'function', name: 'nope' }), null, deps)).toThrow(UnknownVerifierError);
    expect(() => checkVerifier(spec({ kind: 'function', name: 'nope' }), null, deps)).toThrow(
      /verifier.name: unknown verifier function "nope"/,
    );
    expect(() => checkVerifier(spec({ kind: 'env' }), null, deps)).toThrow(/kind env needs/);
    expect(() => verifierSpecSchema.parse({ kind: 'oracle' })).toThrow();
  });
});
