import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { anvilTrain } from '@anvil/testing';

/**
 * Failures a user can see: `anvil train` runs that cannot learn end with a non-zero exit code and
 * say why, with the first error in full, instead of exiting 0 with "held-out 0.0% -> 0.0%".
 */
const work = mkdtempSync(join(tmpdir(), 'anvil-failures-'));
// The agent runs sandboxed, as a uid of its own that reads its script from here.
chmodSync(work, 0o755);
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** `anvil train` on a run configuration written to a file of its own. */
function trainOn(config: object) {
  const file = join(work, `run-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(file, JSON.stringify(config));
  return anvilTrain(file);
}

// A traceback long enough that a cut from its middle would lose both ends (as a real agent's does).
const FAILING_AGENT = `
import sys
sys.stdin.read()
print("Traceback (most recent call last):", file=sys.stderr)
for i in range(60):
    print(f'  File "agent.py", line {i}, in step_{i}', file=sys.stderr)
print('openai.NotFoundError: Error code: 404 - the gateway serves no such path', file=sys.stderr)
sys.exit(1)
`;

describe('anvil train: runs that cannot learn', () => {
  it('stops early when every rollout fails, exit 4, with the first error in full (the end of the agent stderr included)', async () => {
    writeFileSync(join(work, 'agent.py'), FAILING_AGENT);
    const tasks = Array.from({ length: 10 }, (_, i) => ({
      id: `t${i}`,
      prompt: `What is ${i} + 1?`,
      data: { answer: String(i + 1) },
      split: i < 8 ? 'train' : 'eval',
    }));
    writeFileSync(join(work, 'tasks.jsonl'), tasks.map((t) => JSON.stringify(t)).join('\n') + '\n');
    const r = await trainOn({
      dataDir: join(work, 'data-failing'),
      warmStart: { enabled: false },
      task: {
        set: join(work, 'tasks.jsonl'),
        agent: { kind: 'black-box', name: 'failing-agent', command: ['python3', join(work, 'agent.py')], readOnlyPaths: [work] },
        verifier: { kind: 'function', name: 'final-answer' },
        limits: { maxEnvRetries: 0 },
      },
      rollouts: { groupSize: 2, concurrency: 4 },
      budget: { steps: 3, stallSeconds: 120 },
      eval: { samplesPerTask: 2 },
    });
    expect(r.code, `${r.out.slice(-2000)}\n${r.err.slice(-3000)}`).toBe(4);
    expect(r.err).toMatch(/every rollout so far failed/);
    expect(r.err).toContain('agent failing-agent exited with 1');
    // the last line of the agent's stderr is where the cause is: it must be there, whole
    expect(r.err).toContain('openai.NotFoundError: Error code: 404 - the gateway serves no such path');
    expect(r.err).toMatch(/what to try: /);
    const summary = JSON.parse(r.out.trim().split('\n').pop() as string);
    expect(summary).toMatchObject({ rlSteps: 0, rlStoppedBy: 'rollouts-failed', failure: { cause: 'rollouts-failing' } });
  });

  it('ends a run whose groups all score alike as a stall, exit 3, naming zero variance and what to try', async () => {
    // The built-in model at its random init never solves chain-add: every reward is 0.
    const r = await trainOn({
      dataDir: join(work, 'data-flat'),
      warmStart: { enabled: false },
      task: { evalTasks: 4 },
      rollouts: { groupSize: 2, concurrency: 8, maxTokensPerCall: 8 },
      budget: { steps: 2, stallSeconds: 15 },
      eval: { samplesPerTask: 1 },
    });
    expect(r.code, `${r.out.slice(-2000)}\n${r.err.slice(-3000)}`).toBe(3);
    expect(r.err).toMatch(/the run stalled: .*got equal rewards/);
    expect(r.err).toMatch(/what to try: the model solves none of these tasks/);
    const summary = JSON.parse(r.out.trim().split('\n').pop() as string);
    expect(summary).toMatchObject({ rlSteps: 0, rlStoppedBy: 'stall', failure: { cause: 'zero-variance' } });
    const report = /^report: (.+)$/m.exec(r.out)?.[1];
    expect(report && existsSync(report) && readFileSync(report, 'utf8').length > 1000).toBe(true);
  });
});
