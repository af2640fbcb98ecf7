import { describe, expect, it } from 'vitest';
import { limitsSchema } from '../tasks/task-set';
import { defaultCallBudget, sessionCallLimits } from './session-limits';

describe("a rollout session's call limits", () => {
  it('default to a budget of 4 x maxSteps, at least 256, and no rate limit', () => {
    expect(defaultCallBudget(16)).toBe(256);
    expect(defaultCallBudget(3)).toBe(256);
    expect(defaultCallBudget(100)).toBe(400);
    expect(sessionCallLimits(limitsSchema.parse({}), 16)).toEqual({ maxCalls: 256 });
    expect(sessionCallLimits(limitsSchema.parse({}), 306)).toEqual({ maxCalls: 1224 });
  });

  it("take the task set's own budget, rate and burst (the gateway fills in a burst left out)", () => {
    expect(sessionCallLimits(limitsSchema.parse({ maxCalls: 40, callsPerSecond: 2.5 }), 16)).toEqual({ maxCalls: 40, callsPerSecond: 2.5 });
    expect(sessionCallLimits(limitsSchema.parse({ maxCalls: 40, callsPerSecond: 2, burst: 6 }), 16)).toEqual({
      maxCalls: 40,
      callsPerSecond: 2,
      callBurst: 6,
    });
  });

  it('are checked where the task set is: a burst needs a rate, every number positive', () => {
    expect(limitsSchema.safeParse({ burst: 4 }).error?.issues[0]).toMatchObject({ path: ['burst'], message: /burst needs callsPerSecond/ });
    expect(limitsSchema.safeParse({ maxCalls: 0 }).success).toBe(false);
    expect(limitsSchema.safeParse({ maxCalls: 2.5 }).success).toBe(false);
    expect(limitsSchema.safeParse({ callsPerSecond: 0 }).success).toBe(false);
    expect(limitsSchema.safeParse({ callsPerSecond: 0.5, burst: 1 }).success).toBe(true);
  });
});
