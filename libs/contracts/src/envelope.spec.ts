import { describe, expect, it } from 'vitest';
import { ContractError } from './errors';
import { createEvent, createEventAt, decodeEvent, encodeEvent } from './envelope';
import { encodeFrame } from './codec/binary-frame';
import { EVENTS, EVENT_TYPES } from './events/registry';
import { MAX_EVENT_BYTES } from './topics';
import { sampleLlmCallEvent } from './testing';

const now = 1_700_000_000_000;

/** One valid payload per event type, so every schema is exercised by the round trip. */
const validEvents = () => [
  sampleLlmCallEvent({ promptTokens: 37, outputTokens: 11, seed: 3 }),
  createEvent(
    'rollout.started',
    {
      rolloutId: 'r1',
      groupId: 'g1',
      taskId: 't1',
      taskSetId: 's1',
      sampleIndex: 0,
      groupSize: 8,
      agent: { kind: 'black-box', name: 'example' },
      policyVersionAtStart: 3,
      startedAt: now,
    },
    { key: 'r1', producer: 'test' },
  ),
  createEvent(
    'rollout.completed',
    {
      rolloutId: 'r1',
      groupId: 'g1',
      taskId: 't1',
      finishReason: 'max_context',
      outcomeReward: 0.5,
      processRewards: [{ callId: 'c1', value: -0.25, label: 'format' }],
      numCalls: 4,
      error: null,
      completedAt: now,
    },
    { key: 'r1', producer: 'test' },
  ),
  createEvent(
    'trajectory.ready',
    {
      trajectoryId: 'tr1',
      rolloutId: 'r1',
      groupId: 'g1',
      taskId: 't1',
      callIds: ['c1', 'c2'],
      finishReason: 'completed',
      reward: 1,
      advantage: 0.7,
      lossMasked: false,
      minPolicyVersion: 2,
      maxPolicyVersion: 3,
      promptTokens: 100,
      outputTokens: 20,
      readyAt: now,
    },
    { key: 'r1', producer: 'test' },
  ),
  createEventAt(
    'train_batch.created',
    1,
    {
      batchId: 'b1',
      step: 4,
      trajectoryIds: ['tr1'],
      samples: [
        {
          sampleId: 'c1',
          trajectoryId: 'tr1',
          groupId: 'g1',
          promptIds: Int32Array.of(1, 2, 3),
          outputIds: Int32Array.of(4, 5),
          behaviourLogprobs: Float32Array.of(-0.1, -2.5),
          outputVersions: Uint32Array.of(3, 3),
          advantage: 0.7,
          lossWeight: 1,
        },
      ],
      policyVersion: 3,
      createdAt: now,
    },
    { key: 'b1', producer: 'test' },
  ),
  createEvent(
    'train_batch.created',
    {
      batchId: 'b2',
      step: 5,
      runId: null,
      trajectoryIds: ['tr1'],
      groupIds: ['g1'],
      samples: [{ sampleId: 'c1', trajectoryId: 'tr1', groupId: 'g1', advantage: 0.7, lossWeight: 1 }],
      blob: { store: 'postgres', sha256: 'b'.repeat(64), bytes: 900, layout: 'anvil-prefix-tree/1', nodes: 5 },
      stats: {
        trajectories: 1,
        samples: 1,
        groups: 1,
        totalTokens: 5,
        uniqueTokens: 5,
        outputTokens: 2,
        sharing: 0,
        staleness: { k: 2, mean: 0, max: 0, shareOlderThanK: 0 },
        positionLag: { mean: 0, max: 0 },
        outOfOrder: { mean: 0, max: 0 },
        difficulty: { batchMean: null, populationMean: null },
        lossMasked: 0,
        trainerWaitMs: null,
      },
      policyVersion: 3,
      createdAt: now,
    },
    { key: 'b2', producer: 'test' },
  ),
  createEventAt(
    'llm_call.recorded',
    1,
    {
      callId: 'c9',
      sessionId: 's9',
      rolloutId: 'r9',
      groupId: 'g1',
      taskId: 't1',
      branchId: 'b0',
      parentCallId: null,
      turnIndex: 0,
      model: 'm',
      promptIds: Int32Array.of(1, 2),
      reusedPromptTokens: 0,
      outputIds: Int32Array.of(3),
      outputLogprobs: Float32Array.of(-1),
      outputVersions: Uint32Array.of(1),
      finishReason: 'stop',
      sampling: { temperature: 1, topP: 1, topK: 0, seed: null },
      timings: { receivedAt: now, firstTokenAt: null, finishedAt: now },
    },
    { key: 'r9', producer: 'test' },
  ),
  createEvent(
    'rollout_group.settled',
    { groupId: 'g1', taskId: 't1', status: 'dropped', reason: 'zero_variance', trajectoryIds: [], retryRolloutIds: ['r3'] },
    { key: 'g1', producer: 'test' },
  ),
  createEvent(
    'weights.published',
    {
      version: 4,
      parentVersion: 3,
      step: 4,
      checkpointId: 'ck4',
      checkpointUri: 'file:///ckpt/4',
      format: 'hf-safetensors',
      sha256: 'a'.repeat(64),
      publishedAt: now,
    },
    { key: 'v4', producer: 'test' },
  ),
  createEvent(
    'policy_version.activated',
    { version: 4, deployment: 'embedded', swapPolicy: 'drain-then-swap', activatedAt: now },
    { key: 'embedded', producer: 'test' },
  ),
  createEvent(
    'train_batch.trained',
    {
      batchId: 'b2',
      batchStep: 5,
      runId: null,
      trainerStep: 6,
      policyVersion: 6,
      groupIds: ['g1'],
      trajectoryIds: ['tr1'],
      outcome: 'trained',
      reason: null,
      checkpointed: false,
      trainedAt: now,
    },
    { key: 'b2', producer: 'test' },
  ),
  createEvent(
    'evaluation.requested',
    { evalId: 'e1', taskSetId: 's1', policyVersion: 4, samplesPerTask: 1, requestedAt: now },
    { key: 'e1', producer: 'test' },
  ),
  createEvent(
    'evaluation.completed',
    {
      evalId: 'e1',
      taskSetId: 's1',
      policyVersion: 4,
      results: [{ taskId: 't1', rolloutId: 'eval:g.0', reward: 0.8, success: true, finishReason: 'completed' }],
      successRate: 1,
      meanReward: 0.8,
      versionDrift: 0,
      startedAt: now,
      completedAt: now,
    },
    { key: 'e1', producer: 'test' },
  ),
  createEvent(
    'rollout.started',
    {
      rolloutId: 'r2',
      groupId: 'eval:g2',
      taskId: 't1',
      taskSetId: 's1',
      sampleIndex: 0,
      groupSize: 1,
      agent: { kind: 'white-box', name: 'loop' },
      policyVersionAtStart: 4,
      startedAt: now,
      queuePosition: 17,
      purpose: 'eval',
      evalId: 'e1',
    },
    { key: 'r2', producer: 'test' },
  ),
];

describe('event envelope', () => {
  it('covers every registered event type', () => {
    expect(new Set(validEvents().map((e) => e.type))).toEqual(new Set(EVENT_TYPES));
  });

  it.each(validEvents().map((e) => [e.type, e] as const))('round-trips %s bit-exactly', (_type, event) => {
    const decoded = decodeEvent(encodeEvent(event));
    expect(decoded).toEqual(event);
  });

  it('keeps typed arrays typed and bit-exact, including NaN payloads and -0', () => {
    const event = sampleLlmCallEvent({ promptTokens: 5, outputTokens: 3 });
    event.payload.outputLogprobs.set([-0, -Infinity, -1e-30]);
    const decoded = decodeEvent(encodeEvent(event));
    if (decoded.type !== 'llm_call.recorded') throw new Error('wrong type');
    expect(decoded.payload.outputLogprobs).toBeInstanceOf(Float32Array);
    expect(Buffer.from(decoded.payload.outputLogprobs.buffer)).toEqual(Buffer.from(event.payload.outputLogprobs.buffer));
    expect(Object.is(decoded.payload.outputLogprobs[0], -0)).toBe(true);
  });

  it('encodes a 256k-token call in ~12 bytes a token', () => {
    const event = sampleLlmCallEvent({ promptTokens: 256 * 1024, outputTokens: 256 * 1024, seed: 9 });
    const buf = encodeEvent(event);
    expect(buf.length).toBeLessThan(256 * 1024 * 16 + 4096);
    const decoded = decodeEvent(buf);
    if (decoded.type !== 'llm_call.recorded') throw new Error('wrong type');
    expect(Buffer.compare(Buffer.from(decoded.payload.promptDeltaIds.buffer), Buffer.from(event.payload.promptDeltaIds.buffer))).toBe(0);
    expect(Buffer.compare(Buffer.from(decoded.payload.outputLogprobs.buffer), Buffer.from(event.payload.outputLogprobs.buffer))).toBe(0);
  });

  it('rejects an unknown version with the supported versions named', () => {
    const event = { ...validEvents()[1], version: 2 };
    const err = captureError(() => decodeEvent(encodeFrame(event)));
    expect(err.reason).toBe('unknown_version');
    expect(err.message).toContain('supported: 1');
  });

  it('rejects an unknown type', () => {
    const event = { ...validEvents()[1], type: 'rollout.exploded' };
    expect(captureError(() => decodeEvent(encodeFrame(event))).reason).toBe('unknown_type');
  });

  it('rejects invalid payloads listing every problem', () => {
    const event = sampleLlmCallEvent({ promptTokens: 4, outputTokens: 3 });
    (event.payload as { outputLogprobs: Float32Array }).outputLogprobs = new Float32Array(2);
    (event.payload as { turnIndex: number }).turnIndex = -1;
    const err = captureError(() => encodeEvent(event));
    expect(err.reason).toBe('invalid_payload');
    expect(err.message).toContain('turnIndex');
    expect(err.message).toContain('must have equal length');
  });

  it('rejects number arrays where typed arrays are required', () => {
    const event = sampleLlmCallEvent({ promptTokens: 2, outputTokens: 1 });
    (event.payload as unknown as { promptDeltaIds: number[] }).promptDeltaIds = [1, 2];
    expect(captureError(() => encodeEvent(event)).message).toContain('expected Int32Array');
  });

  it('rejects garbage, truncated frames and lying blob descriptors', () => {
    expect(captureError(() => decodeEvent(Buffer.from('{"id":1}'))).reason).toBe('malformed_frame');
    const good = encodeEvent(validEvents()[0]);
    expect(captureError(() => decodeEvent(good.subarray(0, good.length - 8))).reason).toBe('malformed_frame');
    const bad = Buffer.from(good);
    bad.writeUInt32LE(bad.length * 2, 4);
    expect(captureError(() => decodeEvent(bad)).reason).toBe('malformed_frame');
  });

  it('rejects oversized events on both sides', () => {
    expect(captureError(() => decodeEvent(Buffer.alloc(MAX_EVENT_BYTES + 1))).reason).toBe('oversized');
    const huge = sampleLlmCallEvent({ promptTokens: MAX_EVENT_BYTES / 4, outputTokens: 1 });
    expect(captureError(() => encodeEvent(huge)).reason).toBe('oversized');
  });

  it('every event type lives on a topic and has a current version it can validate', () => {
    for (const [type, entry] of Object.entries(EVENTS)) {
      expect(entry.topic, type).toMatch(/^anvil\./);
      expect(Object.keys(entry.versions)).toContain(String(entry.current));
    }
  });
});

function captureError(fn: () => unknown): ContractError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ContractError);
    return err as ContractError;
  }
  throw new Error('expected a ContractError');
}
