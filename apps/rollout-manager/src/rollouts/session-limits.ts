import type { CreateSessionRequest } from '@anvil/contracts';
import type { RolloutLimits } from '../tasks/task-set';

/**
 * A rollout's call budget when its task set names none: 4 x maxSteps, at least 256.
 *
 * Generous, because the budget is a guard, not the step limit. The white-box loop stops itself
 * at maxSteps step calls, and what it calls beyond them (a summary per step at most, a
 * delegated sub-agent's few steps) stays within 4x, so today's white-box runs never meet it. A
 * black-box harness makes calls that are not steps (compaction, titles, sub-agents, its own
 * retries) and its task set often leaves maxSteps at the default 16: the floor lets a long
 * coding episode of a few hundred calls finish.
 *
 * Finite, because an agent that loops on the API (one made 2,000 calls in 21 s) would otherwise
 * be trained on every one of them: it is stopped at the budget and its rollout ends as max_steps.
 */
export function defaultCallBudget(maxSteps: number): number {
  return Math.max(256, 4 * maxSteps);
}

/**
 * The call limits a rollout's gateway session is opened with: the budget (its own or the
 * default), and the rate limit only when the task set asks for one (the pace a healthy agent
 * calls at depends on the backend: no default rate suits every deployment). The gateway fills in
 * a burst left out.
 */
export function sessionCallLimits(
  limits: Pick<RolloutLimits, 'maxCalls' | 'callsPerSecond' | 'burst'>,
  maxSteps: number,
): Pick<CreateSessionRequest, 'maxCalls' | 'callsPerSecond' | 'callBurst'> {
  return {
    maxCalls: limits.maxCalls ?? defaultCallBudget(maxSteps),
    ...(limits.callsPerSecond !== undefined ? { callsPerSecond: limits.callsPerSecond } : {}),
    ...(limits.burst !== undefined ? { callBurst: limits.burst } : {}),
  };
}
