import { createEvent, type CallsRefused, type EventEnvelope, type RolloutFinishReason } from '@anvil/contracts';
import { agentName, type TaskSetSpec } from '../tasks/task-set';
import type { GroupRow, RolloutRow } from '../state-store';

/**
 * The two events of a rollout, with deterministic event ids (`<rolloutId>:started`,
 * `<rolloutId>:completed`): a republish after a crash or a retried publish is the same event, so
 * consumers deduplicate it and the first one stays.
 */
export function startedEvent(o: {
  producer: string;
  spec: Pick<TaskSetSpec, 'id' | 'agent'>;
  group: GroupRow;
  rollout: RolloutRow;
  versionAtStart: number;
  startedAt?: number;
}): EventEnvelope<'rollout.started'> {
  const { group, rollout } = o;
  return createEvent(
    'rollout.started',
    {
      rolloutId: rollout.id,
      groupId: group.id,
      taskId: group.taskId,
      taskSetId: o.spec.id,
      sampleIndex: rollout.sampleIndex,
      groupSize: group.groupSize,
      agent: { kind: o.spec.agent.kind, name: agentName(o.spec.agent) },
      policyVersionAtStart: o.versionAtStart,
      startedAt: o.startedAt ?? Date.now(),
      queuePosition: rollout.queuePosition,
      purpose: group.purpose,
      ...(group.evalId ? { evalId: group.evalId } : {}),
    },
    { key: rollout.id, producer: o.producer, id: `${rollout.id}:started` },
  );
}

export interface CompletedFields {
  rolloutId: string;
  groupId: string;
  taskId: string;
  finishReason: RolloutFinishReason;
  outcomeReward: number | null;
  processRewards: { callId: string; value: number }[];
  numCalls: number;
  error: string | null;
  versionAtStart: number;
  success: boolean | null;
  /** Calls its session's call limits refused (absent: not known, e.g. the session could not be read at its close). */
  callsRefused?: CallsRefused;
}

/** `versionsSpanned` counts the activations the manager saw between the start and the end, both counted. */
export function completedEvent(o: CompletedFields & { producer: string; versionAtEnd: number }): EventEnvelope<'rollout.completed'> {
  return createEvent(
    'rollout.completed',
    {
      rolloutId: o.rolloutId,
      groupId: o.groupId,
      taskId: o.taskId,
      finishReason: o.finishReason,
      outcomeReward: o.outcomeReward,
      processRewards: o.processRewards,
      numCalls: o.numCalls,
      error: o.error === null ? null : o.error.slice(0, 10_000),
      completedAt: Date.now(),
      policyVersionAtEnd: o.versionAtEnd,
      versionsSpanned: versionsSpanned(o.versionAtStart, o.versionAtEnd),
      success: o.success,
      ...(o.callsRefused ? { callsRefused: o.callsRefused } : {}),
    },
    { key: o.rolloutId, producer: o.producer, id: `${o.rolloutId}:completed` },
  );
}

export function versionsSpanned(versionAtStart: number, versionAtEnd: number): number {
  return Math.max(1, versionAtEnd - versionAtStart + 1);
}
