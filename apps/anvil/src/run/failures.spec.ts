import { describe, expect, it } from 'vitest';
import { allFailedThreshold, describeFailure, RolloutFailures } from './failures';
import type { CompletedRollout } from './services';

let n = 0;
const rollout = (o: Partial<CompletedRollout> & { groupId: string }): CompletedRollout => ({
  rolloutId: `r${++n}`,
  purpose: 'train',
  finishReason: 'completed',
  outcomeReward: 0,
  error: null,
  ...o,
});
const TRACEBACK = [
  'agent my-agent exited with 1: Traceback (most recent call last):',
  '  File "agent.py", line 12, in <module>',
  '    reply = client.chat.completions.create(model=MODEL, messages=messages)',
  'openai.NotFoundError: Error code: 404 - {"error": {"message": "no route POST /v1/responses"}}',
].join('\n');

describe('what the driver tells a user when a run cannot learn', () => {
  it('gives up once two groups of rollouts (at least 8) all failed, keeping the first error in full', () => {
    const f = new RolloutFailures(4);
    expect(allFailedThreshold(4)).toBe(8);
    for (let i = 0; i < 7; i++)
      f.record(rollout({ groupId: 'g', finishReason: 'env_error', outcomeReward: null, error: i === 0 ? TRACEBACK : 'later' }));
    expect(f.allFailed()).toBeNull();
    f.record(rollout({ groupId: 'g', finishReason: 'env_error', outcomeReward: null, error: 'later' }));
    const failure = f.allFailed();
    expect(failure?.cause).toBe('rollouts-failing');
    expect(failure?.firstError).toContain(TRACEBACK);
    // the whole text: the error's last line (where the 404 is) included, and what to try
    const text = describeFailure(failure!);
    expect(text).toContain('openai.NotFoundError: Error code: 404');
    expect(text).toMatch(/what to try: .*run the agent by hand/);
  });

  it('stops early only when no rollout ever succeeded (evaluation rollouts count); later failures go to the stall check', () => {
    const f = new RolloutFailures(2);
    f.record(rollout({ groupId: 'eval:1', purpose: 'eval', finishReason: 'completed', outcomeReward: 1 }));
    for (let i = 0; i < 20; i++) f.record(rollout({ groupId: 'g', finishReason: 'env_error', outcomeReward: null, error: 'x' }));
    expect(f.allFailed()).toBeNull();
    expect(f.diagnoseStall({ running: 0, queuedGroups: 1 }).cause).toBe('rollouts-failing');
  });

  it('puts a stall down to failing rollouts when most train rollouts end in env_error', () => {
    const f = new RolloutFailures(2);
    f.record(rollout({ groupId: 'a', outcomeReward: 1 }));
    for (let i = 0; i < 3; i++)
      f.record(rollout({ groupId: 'b', finishReason: 'env_error', outcomeReward: null, error: 'verifier: boom' }));
    const d = f.diagnoseStall({ running: 2, queuedGroups: 5 });
    expect(d.cause).toBe('rollouts-failing');
    expect(d.message).toContain('env_error 3');
    expect(d.firstError).toContain('verifier: boom');
  });

  it('puts a stall down to zero variance when (nearly) every group scores alike, and says which way', () => {
    const none = new RolloutFailures(2);
    for (let g = 0; g < 20; g++) for (let i = 0; i < 2; i++) none.record(rollout({ groupId: `g${g}`, outcomeReward: 0 }));
    none.record(rollout({ groupId: 'h', outcomeReward: 0 }));
    none.record(rollout({ groupId: 'h', outcomeReward: 0.2 })); // one group in 21 with a signal is not enough for a batch
    const d = none.diagnoseStall({ running: 0, queuedGroups: 0 });
    expect(d.cause).toBe('zero-variance');
    expect(d.message).toMatch(/20 of 21 finished groups got equal rewards/);
    expect(d.advice).toMatch(/solves none of these tasks/);
    const all = new RolloutFailures(2);
    for (let g = 0; g < 3; g++) for (let i = 0; i < 2; i++) all.record(rollout({ groupId: `g${g}`, outcomeReward: 1 }));
    expect(all.diagnoseStall({ running: 0, queuedGroups: 0 }).advice).toMatch(/harder or more varied tasks/);
  });

  it('tells rollouts that never finish from rollouts that never start', () => {
    expect(new RolloutFailures(2).diagnoseStall({ running: 8, queuedGroups: 3 }).cause).toBe('none-finished');
    expect(new RolloutFailures(2).diagnoseStall({ running: 0, queuedGroups: 3 }).cause).toBe('nothing-admitted');
  });
});
