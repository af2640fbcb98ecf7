import { randomUUID } from 'node:crypto';
import { createEvent, createEventAt, validateEvent, type AnyEventEnvelope, type EventEnvelope } from '../envelope';
import type { EventPayload, EventType } from '../events/registry';
import type { TrainBatchV1 } from '../events/train-batch';

/**
 * Contract-valid events for store and consumer tests, one rollout's ids at a time. Every
 * builder takes overrides for the payload and validates the result, so a test can never
 * store something no producer could send.
 */
function build<T extends EventType>(type: T, payload: EventPayload<T>, key: string): EventEnvelope<T> {
  const event = createEvent(type, payload, { key, producer: 'persistence-test' });
  validateEvent(event);
  return event;
}

export const uid = (prefix: string) => `${prefix}-${randomUUID()}`;

export interface RolloutIds {
  taskSetId: string;
  taskId: string;
  groupId: string;
  rolloutId: string;
}

export function newRolloutIds(): RolloutIds {
  return { taskSetId: uid('set'), taskId: uid('task'), groupId: uid('group'), rolloutId: uid('rollout') };
}

export function rolloutStarted(ids: RolloutIds, overrides: Partial<EventPayload<'rollout.started'>> = {}) {
  return build(
    'rollout.started',
    {
      ...ids,
      sampleIndex: 0,
      groupSize: 4,
      agent: { kind: 'white-box', name: 'test-agent' },
      policyVersionAtStart: 3,
      startedAt: 1_700_000_000_000,
      ...overrides,
    },
    ids.rolloutId,
  );
}

export function rolloutCompleted(ids: RolloutIds, overrides: Partial<EventPayload<'rollout.completed'>> = {}) {
  return build(
    'rollout.completed',
    {
      rolloutId: ids.rolloutId,
      groupId: ids.groupId,
      taskId: ids.taskId,
      finishReason: 'completed',
      outcomeReward: 1,
      processRewards: [],
      numCalls: 2,
      error: null,
      completedAt: 1_700_000_100_000,
      ...overrides,
    },
    ids.rolloutId,
  );
}

/** A v2 call; `promptIds` (a whole prompt, v1 style) is cut to its delta after `reusedPromptTokens`. */
export function llmCall(ids: RolloutIds, overrides: Partial<EventPayload<'llm_call.recorded'>> & { promptIds?: Int32Array } = {}) {
  const { promptIds: whole, ...rest } = overrides;
  const outputIds = overrides.outputIds ?? Int32Array.from([11, 12, 13]);
  const reused = overrides.reusedPromptTokens ?? 0;
  const delta = whole ? whole.slice(reused) : (overrides.promptDeltaIds ?? Int32Array.from([1, 2, 3, 4]));
  return build(
    'llm_call.recorded',
    {
      callId: uid('call'),
      sessionId: `session-${ids.rolloutId}`,
      rolloutId: ids.rolloutId,
      groupId: ids.groupId,
      taskId: ids.taskId,
      branchId: 'main',
      parentCallId: null,
      turnIndex: 0,
      model: 'tiny-qwen',
      reusedPromptTokens: reused,
      outputIds,
      outputLogprobs: new Float32Array(outputIds.length).fill(-0.5),
      outputVersions: new Uint32Array(outputIds.length).fill(3),
      finishReason: 'stop',
      sampling: { temperature: 1, topP: 1, topK: 0, seed: null },
      timings: { receivedAt: 1_700_000_000_500, firstTokenAt: 1_700_000_000_600, finishedAt: 1_700_000_000_900 },
      ...rest,
      promptLength: reused + delta.length,
      promptDeltaIds: delta,
    },
    ids.rolloutId,
  );
}

export function trajectoryReady(ids: RolloutIds, overrides: Partial<EventPayload<'trajectory.ready'>> = {}) {
  return build(
    'trajectory.ready',
    {
      trajectoryId: uid('traj'),
      rolloutId: ids.rolloutId,
      groupId: ids.groupId,
      taskId: ids.taskId,
      callIds: [],
      finishReason: 'completed',
      reward: 1,
      advantage: 0.5,
      lossMasked: false,
      minPolicyVersion: 3,
      maxPolicyVersion: 3,
      promptTokens: 4,
      outputTokens: 3,
      readyAt: 1_700_000_200_000,
      ...overrides,
    },
    ids.rolloutId,
  );
}

/** train_batch.created v1 (samples inline), as written before the claim-check: the projections still read it. */
export function trainBatchCreated(trajectoryIds: string[], overrides: Partial<TrainBatchV1> = {}) {
  const batchId = overrides.batchId ?? uid('batch');
  const event = createEventAt(
    'train_batch.created',
    1,
    {
      batchId,
      step: 7,
      trajectoryIds,
      samples: trajectoryIds.map((trajectoryId, i) => ({
        sampleId: `${trajectoryId}-s${i}`,
        trajectoryId,
        groupId: 'group',
        promptIds: Int32Array.from([1, 2, 3]),
        outputIds: Int32Array.from([4, 5]),
        behaviourLogprobs: Float32Array.from([-0.1, -0.2]),
        outputVersions: Uint32Array.from([3, 3]),
        advantage: 0.5,
        lossWeight: 1,
      })),
      policyVersion: 3,
      createdAt: 1_700_000_300_000,
      ...overrides,
    },
    { key: batchId, producer: 'persistence-test' },
  );
  validateEvent(event);
  return event as unknown as EventEnvelope<'train_batch.created'>;
}

export function weightsPublished(version: number, overrides: Partial<EventPayload<'weights.published'>> = {}) {
  return build(
    'weights.published',
    {
      version,
      parentVersion: version > 0 ? version - 1 : null,
      step: version * 10,
      checkpointId: uid('ckpt'),
      checkpointUri: `file:///checkpoints/v${version}`,
      format: 'hf-safetensors',
      sha256: 'a'.repeat(64),
      publishedAt: 1_700_000_400_000 + version,
      ...overrides,
    },
    String(version),
  );
}

export function policyVersionActivated(version: number, overrides: Partial<EventPayload<'policy_version.activated'>> = {}) {
  return build(
    'policy_version.activated',
    { version, deployment: 'embedded', swapPolicy: 'drain-then-swap', activatedAt: 1_700_000_500_000 + version, ...overrides },
    String(version),
  );
}

/** The same envelope as a redelivery would carry it: equal content, distinct objects. */
export function redeliver<E extends AnyEventEnvelope>(event: E): E {
  return structuredClone(event);
}
