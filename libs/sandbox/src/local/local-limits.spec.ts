// The local sandbox's resource limits: CPU seconds, memory, file size, tmpfs size, output caps.
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { besideNeighbour, expectNormal, localSandboxSuite, python, workspace } from '../testing/harness';

const UID_BASE = 1_900_030_000;
const UID_COUNT = 64;
const MiB = 1024 * 1024;

const suite = localSandboxSuite(UID_BASE, UID_COUNT);

describe('local sandbox: limits', () => {
  it('gigabytes of output are capped and counted, and the run still ends normally', async () => {
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({
        label: 'flood',
        workspace: workspace(),
        limits: { wallMs: 60_000, stdoutBytes: 64 * 1024, stderrBytes: 1024 },
        argv: ['sh', '-c', 'head -c 2G /dev/zero; head -c 3M /dev/zero >&2; echo last'],
      }),
    );
    expectNormal({ ...r, stderr: '' });
    expect(r.stdoutBytes).toBe(2 * 1024 * MiB + 5);
    expect(r.stderrBytes).toBe(3 * MiB);
    expect(Buffer.byteLength(r.stdout)).toBe(64 * 1024);
    expect(r.stderr.length).toBe(1024);
    expect(r.stdoutTail.endsWith('last\n')).toBe(true);
  });

  it('an output limit stops a program that would write forever', async () => {
    const r = await suite.backend.run({
      label: 'yes',
      workspace: workspace(),
      limits: { wallMs: 60_000, outputBytes: 8 * MiB },
      argv: ['yes'],
    });
    expect({ reason: r.reason, limit: r.limit, detail: r.detail }).toEqual({
      reason: 'limit',
      limit: 'output',
      detail: `more than ${8 * MiB} bytes of output`,
    });
    expect(r.stdoutBytes).toBeGreaterThan(8 * MiB);
  });

  it('CPU seconds: a busy loop ends as a cpu limit', async () => {
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({
        label: 'spin',
        workspace: workspace(),
        limits: { wallMs: 30_000, cpuSeconds: 1 },
        argv: python('while True: pass'),
      }),
    );
    expect({ reason: r.reason, limit: r.limit, signal: r.signal }).toEqual({ reason: 'limit', limit: 'cpu', signal: 'SIGXCPU' });
    expect(r.cpuSeconds).toBeGreaterThan(0.5); // the kernel counts in ticks; rusage reads a little under
  });

  it('memory: an allocation over the limit fails inside; a program within it runs', async () => {
    const limits = { wallMs: 30_000, memoryBytes: 256 * MiB };
    const big = await besideNeighbour(
      suite.backend,
      suite.gateway,
      () =>
        suite.backend.run({
          label: 'hog',
          workspace: workspace(),
          limits,
          argv: python('x = bytearray(512 * 1024 * 1024); print("allocated")'),
        }),
      { limits },
    );
    expect({ reason: big.reason, exitCode: big.exitCode, stdout: big.stdout }).toEqual({ reason: 'exit', exitCode: 1, stdout: '' });
    expect(big.stderr).toContain('MemoryError');
    const small = await suite.backend.run({
      label: 'fits',
      workspace: workspace(),
      limits,
      argv: python('x = bytearray(64 * 1024 * 1024); print("allocated")'),
    });
    expectNormal(small);
  });

  it('file size: a write past the limit ends the writer, and the file stops at the limit', async () => {
    const ws = workspace();
    const r = await besideNeighbour(suite.backend, suite.gateway, () =>
      suite.backend.run({
        label: 'big-file',
        workspace: ws,
        limits: { wallMs: 30_000, fileSizeBytes: MiB },
        argv: ['dd', 'if=/dev/zero', `of=${join(ws, 'big')}`, 'bs=64K', 'count=100'],
      }),
    );
    expect({ reason: r.reason, limit: r.limit, signal: r.signal }).toEqual({ reason: 'limit', limit: 'file-size', signal: 'SIGXFSZ' });
    expect(statSync(join(ws, 'big')).size).toBe(MiB);
  });

  it('the private /tmp and $HOME hold at most their size', async () => {
    const r = await suite.backend.run({
      label: 'tmpfs',
      workspace: workspace(),
      limits: { wallMs: 30_000, tmpfsBytes: 8 * MiB },
      argv: ['sh', '-c', 'head -c 16M /dev/zero > /tmp/fill; echo tmp=$?; head -c 16M /dev/zero > $HOME/fill; echo home=$?'],
    });
    expect(r.reason).toBe('exit');
    expect(r.stdout).toBe('tmp=1\nhome=1\n');
    expect(r.stderr).toContain('No space left on device');
  });
});
