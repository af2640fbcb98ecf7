import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { BlackBoxSpec } from '../agents/black-box-launch';
import { blackBoxAgentProblems, commandVerifierProblems, taskWorkspaceProblems } from './sandbox-checks';
import { agentSpecSchema, verifierSpecSchema } from './task-set';

const root = mkdtempSync(join(tmpdir(), 'rm-checks-'));
chmodSync(root, 0o755);
mkdirSync(join(root, 'agent'));
writeFileSync(join(root, 'agent', 'run.sh'), '#!/bin/sh\n', { mode: 0o755 });
mkdirSync(join(root, 'private'), { mode: 0o700 });
mkdirSync(join(root, 'snap'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const agent = (extra: Record<string, unknown>) =>
  agentSpecSchema.parse({ kind: 'black-box', name: 'a', command: ['sh'], ...extra }) as BlackBoxSpec;
const asRoot = process.getuid?.() === 0;

describe('what a task set needs of the machine', () => {
  it('a black-box agent: its cwd, its read-only paths (there, readable by a sandbox, not the system), its command inside the sandbox', () => {
    expect(blackBoxAgentProblems(agent({ cwd: root, command: ['./agent/run.sh'], readOnlyPaths: ['agent'] }), '/')).toEqual([]);
    expect(blackBoxAgentProblems(agent({ cwd: join(root, 'gone') }), '/')).toEqual([`agent.cwd: ${join(root, 'gone')} does not exist`]);
    const problems = blackBoxAgentProblems(
      agent({ cwd: root, command: ['./agent/run.sh'], readOnlyPaths: ['missing', '/etc', ...(asRoot ? ['private'] : [])] }),
      '/',
      'task.agent',
    );
    expect(problems).toEqual([
      `task.agent.readOnlyPaths: ${join(root, 'missing')} does not exist`,
      'task.agent.readOnlyPaths: /etc is part of the system a sandbox mounts (or hides) itself: name a directory of your own',
      ...(asRoot ? [expect.stringMatching(/private is not readable by other users \(mode 700\).*chmod o\+rX/)] : []),
      `task.agent.command: ${join(root, 'agent', 'run.sh')} is outside what its sandbox shows: add its directory to readOnlyPaths`,
    ]);
    // Unsandboxed, the host's PATH is what counts.
    expect(blackBoxAgentProblems(agent({ cwd: root, command: ['./agent/run.sh'], sandbox: 'none' }), '/')).toEqual([]);
    expect(blackBoxAgentProblems(agent({ command: ['no-such-agent-cli'] }), root)[0]).toMatch(
      /agent\.command: no-such-agent-cli is not on the PATH inside its sandbox .*readOnlyPaths/,
    );
  });

  it("a task's workspace snapshot: a directory that exists, for black-box agents only", () => {
    const bb = agent({ cwd: root });
    expect(taskWorkspaceProblems({ id: 't1', workspace: 'snap', setup: ['true'] }, bb, '/')).toEqual([]);
    expect(taskWorkspaceProblems({ id: 't2', workspace: 'nope' }, bb, '/')).toEqual([
      expect.stringMatching(
        new RegExp(`^task t2: its workspace ${join(root, 'nope')} \\(the repository snapshot .*\\) is not a directory`),
      ),
    ]);
    expect(taskWorkspaceProblems({ id: 't3', setup: ['true'] }, { kind: 'white-box', name: 'anvil-loop' }, '/')).toEqual([
      "task t3: workspace and setup are for black-box agents (this task set's agent is white-box)",
    ]);
  });

  it("a command verifier's read-only paths, relative to the manager's directory", () => {
    const v = verifierSpecSchema.parse({ kind: 'command', command: ['sh'], readOnlyPaths: ['agent', 'missing'] });
    expect(commandVerifierProblems(v, root)).toEqual([`verifier.readOnlyPaths: ${join(root, 'missing')} does not exist`]);
    expect(commandVerifierProblems(verifierSpecSchema.parse({ kind: 'function', name: 'x' }), root)).toEqual([]);
    const scorer = (sandbox: string) => verifierSpecSchema.parse({ kind: 'command', command: ['no-such-scorer'], sandbox });
    expect(commandVerifierProblems(scorer('local'), root)).toEqual([
      expect.stringMatching(/^verifier\.command: no-such-scorer is not on the PATH inside its sandbox/),
    ]);
    expect(commandVerifierProblems(scorer('none'), root)).toEqual(['verifier.command: no-such-scorer is not on PATH']);
  });

  it("a command's file arguments that its sandbox would not show (node /somewhere/verifier.mjs)", () => {
    const script = join(root, 'agent', 'run.sh');
    const node = (extra: Record<string, unknown>) => verifierSpecSchema.parse({ kind: 'command', command: ['sh', script], ...extra });
    expect(commandVerifierProblems(node({}), root)).toEqual([
      `verifier.command: its argument ${script} is outside what its sandbox shows: add its directory to readOnlyPaths`,
    ]);
    expect(commandVerifierProblems(node({ readOnlyPaths: ['agent'] }), root)).toEqual([]);
    expect(commandVerifierProblems(node({ sandbox: 'none' }), root)).toEqual([]);
    // not a file of this machine: an argument like any other
    expect(commandVerifierProblems(node({ command: ['sh', '-c', '/no/such/file'] }), root)).toEqual([]);
    expect(blackBoxAgentProblems(agent({ command: ['sh', script] }), root)).toEqual([
      `agent.command: its argument ${script} is outside what its sandbox shows: add its directory to readOnlyPaths`,
    ]);
  });
});
