import {
  createEvent,
  createEventAt,
  type AnyEventEnvelope,
  type EventEnvelope,
  type LlmCallRecordedV1,
  type RolloutFinishReason,
} from '@anvil/contracts';

let seq = 0;
export const uid = (p: string) => `${p}-${process.pid}-${Date.now().toString(36)}-${(seq++).toString(36)}`;

export function started(o: {
  rolloutId: string;
  groupId: string;
  taskId?: string;
  sampleIndex?: number;
  groupSize: number;
  queuePosition?: number;
  startedAt?: number;
  purpose?: 'train' | 'eval';
}) {
  return createEvent(
    'rollout.started',
    {
      rolloutId: o.rolloutId,
      groupId: o.groupId,
      taskId: o.taskId ?? 'task',
      taskSetId: 'set',
      sampleIndex: o.sampleIndex ?? 0,
      groupSize: o.groupSize,
      agent: { kind: 'white-box', name: 'test' },
      policyVersionAtStart: 1,
      startedAt: o.startedAt ?? Date.now(),
      ...(o.queuePosition !== undefined ? { queuePosition: o.queuePosition } : {}),
      ...(o.purpose ? { purpose: o.purpose } : {}),
    },
    { key: o.rolloutId, producer: 'test' },
  );
}

export function completed(o: {
  rolloutId: string;
  groupId: string;
  taskId?: string;
  reward: number | null;
  numCalls: number;
  finishReason?: RolloutFinishReason;
  completedAt?: number;
  processRewards?: { callId: string; value: number }[];
}) {
  return createEvent(
    'rollout.completed',
    {
      rolloutId: o.rolloutId,
      groupId: o.groupId,
      taskId: o.taskId ?? 'task',
      finishReason: o.finishReason ?? 'completed',
      outcomeReward: o.reward,
      processRewards: o.processRewards ?? [],
      numCalls: o.numCalls,
      error: null,
      completedAt: o.completedAt ?? Date.now(),
    },
    { key: o.rolloutId, producer: 'test' },
  );
}

/**
 * A trajectory of `calls` calls, each extending the previous (prompt + output + `newTokens`
 * fresh prompt tokens), as v2 events (prompt deltas), plus the v1 (whole prompt) twins.
 */
export function trajectoryCalls(o: {
  rolloutId: string;
  groupId: string;
  taskId?: string;
  calls: number;
  firstPrompt: number;
  newTokens: number;
  outputTokens: number;
  version?: number;
  seed?: number;
  /** Calls (by index) whose output stopped at max tokens (finishReason 'length'). */
  truncated?: number[];
}) {
  let s = (o.seed ?? 7) >>> 0 || 1;
  const tok = () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) % 151_000;
  };
  const v1: LlmCallRecordedV1[] = [];
  let prev: { id: string; seq: number[] } | null = null;
  for (let c = 0; c < o.calls; c++) {
    const id = `${o.rolloutId}-call-${c}`;
    const fresh = Array.from({ length: c === 0 ? o.firstPrompt : o.newTokens }, tok);
    const prompt: number[] = prev ? [...prev.seq, ...fresh] : fresh;
    const outputIds = Array.from({ length: o.outputTokens }, tok);
    v1.push({
      callId: id,
      sessionId: `s-${o.rolloutId}`,
      rolloutId: o.rolloutId,
      groupId: o.groupId,
      taskId: o.taskId ?? 'task',
      branchId: 'main',
      parentCallId: prev?.id ?? null,
      turnIndex: c,
      model: 'tiny',
      promptIds: Int32Array.from(prompt),
      reusedPromptTokens: prev ? prev.seq.length : 0,
      outputIds: Int32Array.from(outputIds),
      outputLogprobs: Float32Array.from(outputIds, (_, k) => -((k % 7) + 1) / 8),
      outputVersions: new Uint32Array(outputIds.length).fill(o.version ?? 1),
      finishReason: o.truncated?.includes(c) ? 'length' : 'stop',
      sampling: { temperature: 1, topP: 1, topK: 0, seed: null },
      timings: { receivedAt: 1, firstTokenAt: null, finishedAt: 2 },
    });
    prev = { id, seq: [...prompt, ...outputIds] };
  }
  const v2 = v1.map((p) => {
    const { promptIds, ...rest } = p;
    return createEvent(
      'llm_call.recorded',
      { ...rest, promptLength: promptIds.length, promptDeltaIds: promptIds.slice(p.reusedPromptTokens) },
      { key: o.rolloutId, producer: 'test', id: p.callId },
    );
  });
  const v1Events = v1.map(
    (p) => createEventAt('llm_call.recorded', 1, p, { key: o.rolloutId, producer: 'test', id: p.callId }) as unknown as AnyEventEnvelope,
  );
  return { v1: v1 as LlmCallRecordedV1[], v2: v2 as EventEnvelope<'llm_call.recorded'>[], v1Events };
}

/** A whole rollout: started, its calls, completed. */
export function rollout(o: {
  rolloutId: string;
  groupId: string;
  groupSize: number;
  reward: number | null;
  calls?: number;
  queuePosition?: number;
  finishReason?: RolloutFinishReason;
  sampleIndex?: number;
  version?: number;
  processRewards?: number[];
  truncated?: number[];
  /** rollout.completed's numCalls when it is not the number of calls made (a producer that miscounts). */
  numCalls?: number;
}) {
  const calls = trajectoryCalls({
    rolloutId: o.rolloutId,
    groupId: o.groupId,
    calls: o.calls ?? 2,
    firstPrompt: 6,
    newTokens: 3,
    outputTokens: 2,
    version: o.version,
    truncated: o.truncated,
  });
  return {
    started: started({ ...o }),
    calls: calls.v2,
    completed: completed({
      rolloutId: o.rolloutId,
      groupId: o.groupId,
      reward: o.reward,
      numCalls: o.numCalls ?? o.calls ?? 2,
      finishReason: o.finishReason,
      ...(o.processRewards ? { processRewards: o.processRewards.map((value, i) => ({ callId: `${o.rolloutId}-call-${i}`, value })) } : {}),
    }),
    v1: calls.v1,
  };
}
