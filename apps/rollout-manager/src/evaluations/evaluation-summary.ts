import type { EvaluationCompletedV1 } from '@anvil/contracts';
import type { RolloutOutcome } from '../rollouts/executor';
import type { GroupState } from '../rollouts/group-state';

/** evaluation.completed of an evaluation's groups, one result per rollout in group and sample order. */
export function evaluationSummary(
  o: { evalId: string; taskSetId: string; version: number; startedAt: number },
  groups: GroupState[],
  outcomes: ReadonlyMap<string, RolloutOutcome>,
): EvaluationCompletedV1 {
  const results = groups.flatMap((g) =>
    g.members.map((m) => {
      const out = outcomes.get(m.id);
      if (!out) throw new Error(`evaluation ${o.evalId}: no outcome for rollout ${m.id}`);
      return {
        taskId: g.task.id,
        rolloutId: m.id,
        reward: out.outcomeReward,
        success: out.success === true,
        finishReason: out.finishReason,
      };
    }),
  );
  const rewards = results.map((r) => r.reward).filter((r): r is number => r !== null);
  return {
    evalId: o.evalId,
    taskSetId: o.taskSetId,
    policyVersion: o.version,
    results,
    successRate: results.length ? results.filter((r) => r.success).length / results.length : 0,
    meanReward: rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : 0,
    versionDrift: [...outcomes.values()].filter((out) => out.versionsSpanned > 1).length,
    startedAt: o.startedAt,
    completedAt: Date.now(),
  };
}
