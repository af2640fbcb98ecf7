/**
 * The verifier's half of repo-fix: the agent's diff run against the held-back tests in a fresh
 * sandbox. A new copy of the pristine snapshot, the diff applied to it, the held-back tests laid
 * over it (replacing any file of the same path the diff wrote), the task's setup, then the test
 * command; each counted test that passes earns its share of the reward.
 */
import { cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SandboxBackend } from '@anvil/sandbox';
import type { EnvTask, VerifyResult } from '../types';
import { applyDiff } from './baseline';
import { layOutSnapshot, writeFiles } from './snapshot';
import { argvOf, resolveIn, type RepoFixData } from './task-data';
import { parseTestOutput, scoreTests } from './test-report';

/** The environment's failure to judge (the tests could not be run), as opposed to the agent's failing them. */
export class RepoFixVerifyError extends Error {
  override readonly name = 'RepoFixVerifyError';
}

export interface HeldBackOptions {
  root: string;
  sandbox: SandboxBackend;
  /** Wall clock when the task gives none. */
  testTimeoutMs: number;
  /** A diff larger than this is not applied (the rollout scores 0). */
  maxDiffBytes: number;
  signal?: AbortSignal;
}

/** Output kept from the test run: enough for every per-test line of a large suite. */
const TEST_OUTPUT_BYTES = 8 << 20;

export async function runHeldBackTests(task: EnvTask, data: RepoFixData, diff: string, o: HeldBackOptions): Promise<VerifyResult> {
  const bytes = Buffer.byteLength(diff);
  if (bytes > o.maxDiffBytes)
    return {
      outcomeReward: 0,
      success: false,
      detail: `the agent's diff is ${bytes} bytes, over maxDiffBytes ${o.maxDiffBytes}: not applied`,
    };
  // The fresh tree is the sandbox's workspace itself: a directory under a private parent would be out of the sandbox uid's reach.
  const tree = await mkdtemp(join(tmpdir(), 'anvil-repo-fix-verify-'));
  try {
    await layOutSnapshot(data.repo, o.root, tree);
    const refused = await applyDiff(tree, diff);
    if (refused !== null)
      return { outcomeReward: 0, success: false, detail: `the agent's diff does not apply to the snapshot: ${refused}` };
    if (data.test.dir !== undefined)
      await cp(resolveIn(o.root, data.test.dir), tree, { recursive: true, verbatimSymlinks: true, force: true });
    if (data.test.files) await writeFiles(tree, data.test.files);
    const wallMs = data.test.timeoutMs ?? o.testTimeoutMs;
    const test = argvOf(data.test.command);
    const r = await o.sandbox.run(
      {
        label: `repo-fix verify ${task.id}`,
        argv: test,
        ...(data.setup ? { setup: argvOf(data.setup) } : {}),
        workspace: tree,
        env: { PYTHONDONTWRITEBYTECODE: '1', NO_COLOR: '1', CI: '1' },
        limits: { wallMs, stdoutBytes: TEST_OUTPUT_BYTES, stderrBytes: TEST_OUTPUT_BYTES },
      },
      o.signal,
    );
    if (r.reason === 'setup-failed')
      throw new RepoFixVerifyError(
        `repo-fix task ${task.id}: the setup before the held-back tests failed: ${r.detail || r.stderrTail.slice(-500)}`,
      );
    if (r.reason === 'timeout')
      throw new RepoFixVerifyError(
        `repo-fix task ${task.id}: the test command \`${test.join(' ')}\` did not finish within ${wallMs} ms (data.test.timeoutMs)`,
      );
    if (r.reason === 'aborted') throw new RepoFixVerifyError(`repo-fix task ${task.id}: the held-back test run was stopped`);
    const results = parseTestOutput(data.test.format, `${r.stdout}\n${r.stderr}`, r.exitCode);
    const score = scoreTests(results, data.test.names);
    const limited = r.reason === 'limit' ? ` (stopped at its ${r.limit} limit)` : '';
    return {
      outcomeReward: score.reward,
      success: score.total > 0 && score.passed === score.total,
      detail:
        `${score.passed}/${score.total} held-back tests pass${limited}` +
        (score.notPassed.length ? `; not passing: ${score.notPassed.join(', ')}` : ''),
    };
  } finally {
    await rm(tree, { recursive: true, force: true });
  }
}
