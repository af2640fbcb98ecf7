import { rm } from 'node:fs/promises';
import { resolve } from 'node:path';
import { SandboxBreachError, type SandboxResult } from '@anvil/sandbox';
import { newWorkspace } from '../agents/workspaces';
import type { VerifyResult } from '../environments/types';
import { sandboxLimitsOf } from '../sandbox/limits';
import { cwdInside, pathInside } from '../sandbox/mounts';
import type { Sandboxes } from '../sandbox/sandboxes';
import type { VerifierSpec } from '../tasks/task-set';
import { checked, VerifierError } from './verifier-result';

type CommandSpec = Extract<VerifierSpec, { kind: 'command' }>;

/** What a command verifier needs of the manager: its sandboxes, and the base of the command's relative paths (its directory). */
export interface CommandVerifierDeps {
  sandboxes: Sandboxes;
  repoRoot: string;
}

/** stdout and stderr kept of a verifier command (its answer is its last stdout line). */
const OUTPUT_CAP = 1 << 20;

/**
 * Runs a command verifier in a fresh sandbox of its spec's kind: `input` as JSON on stdin, in the
 * black-box agent's workspace (what the agent left, at the path its input names; an empty one for
 * other agents), with its read-only paths (relative to the manager's directory) and nothing else
 * of the host, on the spec's wall clock and the default limits. Its answer is its stdout's last
 * line (json) or its exit code (exit-code); anything else is a VerifierError.
 */
export async function commandVerifier(
  spec: CommandSpec,
  input: string,
  agentWorkspace: string | null,
  deps: CommandVerifierDeps,
  signal?: AbortSignal,
): Promise<VerifyResult> {
  const name = spec.command[0];
  const own = agentWorkspace ? null : await newWorkspace('verifier');
  const workspace = agentWorkspace ?? (own as string);
  const local = spec.sandbox === 'local';
  const readOnlyPaths = spec.readOnlyPaths.map((p) => resolve(deps.repoRoot, p));
  const mounts = [workspace, ...readOnlyPaths];
  let r: SandboxResult;
  try {
    const backend = await deps.sandboxes.get(spec.sandbox);
    r = await backend.run(
      {
        label: `verifier ${name}`,
        argv: spec.command,
        workspace,
        cwd: local ? cwdInside(deps.repoRoot, mounts, workspace) : deps.repoRoot,
        env: {
          PATH: local ? pathInside(process.env.PATH, mounts) : (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin'),
          LANG: 'C.UTF-8',
        },
        stdin: { text: input },
        ...(local ? { readOnlyPaths } : {}),
        limits: sandboxLimitsOf({}, { wallMs: spec.timeoutMs, timeoutMs: spec.timeoutMs, outputCapBytes: OUTPUT_CAP }),
      },
      signal,
    );
  } catch (err) {
    if (err instanceof SandboxBreachError) throw err;
    throw new VerifierError(`verifier command ${name} could not be started: ${(err as Error).message}`);
  } finally {
    if (own) await rm(own, { recursive: true, force: true }).catch(() => undefined);
  }
  return answerOf(spec, name, r);
}

/** The verifier's answer from how its command ended. */
function answerOf(spec: CommandSpec, name: string, r: SandboxResult): VerifyResult {
  const stderr = r.stderr.trim().slice(0, 500);
  switch (r.reason) {
    case 'timeout':
      throw new VerifierError(`verifier command ${name} did not finish within ${spec.timeoutMs} ms (${r.detail})`);
    case 'aborted':
      throw new VerifierError('verifier command aborted');
    case 'setup-failed':
      throw new VerifierError(`verifier command ${name} could not be started: ${r.detail}`);
    case 'limit':
      throw new VerifierError(`verifier command ${name} was stopped: ${r.detail}${stderr ? `: ${stderr}` : ''}`);
    case 'exit':
      break;
  }
  if (spec.mode === 'exit-code') {
    if (r.exitCode === null) throw new VerifierError(`verifier command ${name} was killed (${r.signal})`);
    return { outcomeReward: r.exitCode === 0 ? 1 : 0, success: r.exitCode === 0, detail: `exit ${r.exitCode}` };
  }
  if (r.exitCode !== 0) throw new VerifierError(`verifier command ${name} exited ${r.exitCode ?? r.signal}: ${stderr}`);
  const lastLine = r.stdoutTail.trim().split('\n').pop() ?? '';
  let json: unknown;
  try {
    json = JSON.parse(lastLine);
  } catch {
    throw new VerifierError(`verifier command ${name} answered garbage: last stdout line is not JSON`);
  }
  return checked(json, `verifier command ${name}`);
}
