import { describe, expect, it } from 'vitest';
import type { LoopResult } from '../agents/white-box';
import { Sandboxes } from '../sandbox/sandboxes';
import { taskSetSpecSchema } from '../tasks/task-set';
import type { VerifierDeps, VerifierFn } from '../verifiers/verifiers';
import type { AgentRun } from './agent-steps/agent-step';
import type { GroupState } from './group-state';
import { rolloutContext } from './rollout-context';
import { verifyStep } from './verify-step';

function contextWith(verifier: string) {
  const spec = taskSetSpecSchema.parse({ id: 'set', verifier: { kind: 'function', name: verifier } });
  const task = { id: 'set/t1', env: null, messages: [], tools: [], split: 'train' as const, difficulty: 1, data: {} };
  const rollout = {
    id: 'g.0',
    groupId: 'g',
    taskId: task.id,
    sampleIndex: 0,
    queuePosition: 0,
    status: 'running' as const,
    sessionId: 's',
    policyVersionAtStart: 0,
    attempts: 1,
  };
  const group: GroupState = {
    row: { id: 'g', taskId: task.id, taskSetId: spec.id, groupSize: 1, purpose: 'train', evalId: null, status: 'running', startVersion: 0 },
    task,
    spec,
    members: [rollout],
    pending: 1,
    submittedAt: 0,
  };
  return rolloutContext(group, rollout, null, 0, new AbortController().signal);
}

const deps = (fns: Record<string, VerifierFn>): VerifierDeps => ({
  environments: new Map(),
  functions: fns,
  sandboxes: new Sandboxes({ info: () => undefined, warn: () => undefined }),
  repoRoot: process.cwd(),
});

const run = (over: Partial<AgentRun>): AgentRun => ({
  finishReason: 'completed',
  error: null,
  numCalls: 2,
  agentMs: 1,
  transcript: { messages: [], finalAnswer: '3' },
  sessionClosed: true,
  ...over,
});

describe('verifyStep', () => {
  it('white-box: process rewards go to the main loop step calls, in order (turns without a call id get none)', async () => {
    const loop: LoopResult = {
      finish: 'completed',
      messages: [],
      finalAnswer: '3',
      steps: 3,
      callIds: ['c1', 'c3'],
      stepCallIds: ['c1', null, 'c3'],
      sent: [],
      subAgentRuns: 0,
      callsRefused: { budget: 0, rate: 0 },
    };
    const scored = await verifyStep(
      contextWith('f'),
      run({ loop }),
      deps({ f: () => ({ outcomeReward: 1, success: true, processRewards: [0.1, 0.2, 0.3] }) }),
    );
    expect(scored).toMatchObject({ finishReason: 'completed', outcomeReward: 1, success: true, error: null, numCalls: 2 });
    expect(scored.processRewards).toEqual([
      { callId: 'c1', value: 0.1 },
      { callId: 'c3', value: 0.3 },
    ]);
  });

  it('black-box: one value per recorded call; more values than calls is a verifier answering garbage (env_error, unscored)', async () => {
    const calls = [
      { callId: 'c1', message: { role: 'assistant' as const, content: 'a' } },
      { callId: 'c2', message: { role: 'assistant' as const, content: 'b' } },
    ];
    const ok = await verifyStep(
      contextWith('f'),
      run({ calls }),
      deps({ f: () => ({ outcomeReward: 0.5, success: false, processRewards: [1, 0] }) }),
    );
    expect(ok.processRewards).toEqual([
      { callId: 'c1', value: 1 },
      { callId: 'c2', value: 0 },
    ]);
    const garbage = await verifyStep(
      contextWith('f'),
      run({ calls }),
      deps({ f: () => ({ outcomeReward: 1, success: true, processRewards: [1, 1, 1] }) }),
    );
    expect(garbage).toMatchObject({ finishReason: 'env_error', outcomeReward: null, success: null, processRewards: [] });
    expect(garbage.error).toContain('verifier answered garbage: 3 process rewards for 2 recorded calls');
  });

  it('an aborted or failed run is not scored; a verifier that throws ends the rollout as env_error with its message', async () => {
    let asked = 0;
    const f: VerifierFn = () => {
      asked++;
      return { outcomeReward: 1, success: true };
    };
    for (const finishReason of ['aborted', 'env_error'] as const) {
      const out = await verifyStep(contextWith('f'), run({ finishReason, error: 'why' }), deps({ f }));
      expect(out).toMatchObject({ finishReason, error: 'why', outcomeReward: null, success: null, processRewards: [] });
    }
    expect(asked).toBe(0);
    const timedOut = await verifyStep(contextWith('f'), run({ finishReason: 'timeout' }), deps({ f }));
    expect(timedOut).toMatchObject({ finishReason: 'timeout', outcomeReward: 1, success: true });
    const threw = await verifyStep(
      contextWith('g'),
      run({}),
      deps({
        g: () => {
          throw new Error('reward service down');
        },
      }),
    );
    expect(threw).toMatchObject({ finishReason: 'env_error', outcomeReward: null, success: null });
    expect(threw.error).toContain('reward service down');
  });
});
