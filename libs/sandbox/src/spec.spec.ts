import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SandboxSpecError } from './errors';
import { resolveSpec, rlimitArgs } from './spec';

const ws = mkdtempSync(join(tmpdir(), 'anvil-spec-'));
afterAll(() => rmSync(ws, { recursive: true, force: true }));

describe('resolveSpec', () => {
  it('fills in the defaults', async () => {
    const s = await resolveSpec({ label: 'r1', argv: ['true'], workspace: ws, limits: { wallMs: 1000 } });
    expect(s.limits).toEqual({
      wallMs: 1000,
      killGraceMs: 1000,
      tmpfsBytes: 512 * 1024 * 1024,
      stdoutBytes: 1 << 20,
      stderrBytes: 1 << 20,
    });
    expect(s.env).toEqual({});
  });

  it('names every problem of a bad spec at once', async () => {
    const file = join(ws, 'not-a-dir');
    writeFileSync(file, 'x');
    const err = await resolveSpec({
      label: 'bad',
      argv: [],
      workspace: file,
      cwd: 'relative',
      env: { 'BAD-NAME': 'x', OPENAI_API_KEY: 'mine' },
      stdin: { file: '/nonexistent' },
      session: { baseUrl: 'http://127.0.0.1:1/admin/v1', apiKey: '' },
      readOnlyPaths: ['/usr/lib', 'rel'],
      limits: { wallMs: 0, processes: 1.5 },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxSpecError);
    const problems = (err as SandboxSpecError).problems.join('\n');
    for (const part of [
      'argv:',
      'workspace: ',
      'cwd:',
      'BAD-NAME',
      'OPENAI_API_KEY are set from the session',
      'stdin.file',
      "session.baseUrl: expected the session's own URL",
      'session.apiKey',
      '/usr/lib overlaps',
      '"rel" is not an absolute path',
      'limits.wallMs',
      'limits.processes',
    ])
      expect(problems).toContain(part);
  });

  it('refuses a workspace that is, or holds, a directory the sandbox mounts itself', async () => {
    for (const w of ['/', '/etc', '/usr/share', '/run']) {
      const err = await resolveSpec({ label: 'x', argv: ['true'], workspace: w, limits: { wallMs: 1 } }).catch((e: unknown) => e);
      expect((err as SandboxSpecError).problems[0], w).toMatch(/system directory/);
    }
  });
});

describe('rlimitArgs', () => {
  it('passes each given limit, and always turns core dumps off', async () => {
    const s = await resolveSpec({
      label: 'r',
      argv: ['true'],
      workspace: ws,
      limits: { wallMs: 1, cpuSeconds: 2, memoryBytes: 3, processes: 4, fileSizeBytes: 5 },
    });
    expect(rlimitArgs(s.limits)).toEqual([
      '--rlimit',
      'core=0',
      '--rlimit',
      'cpu=2',
      '--rlimit',
      'data=3',
      '--rlimit',
      'nproc=4',
      '--rlimit',
      'fsize=5',
    ]);
  });
});
