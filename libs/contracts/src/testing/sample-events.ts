import { createEvent, type AnyEventEnvelope, type EventEnvelope } from '../envelope';
import { EVENT_TYPES, type EventType } from '../events/registry';

/**
 * Valid events of every type for bus tests. Float arrays carry the values a lossy path would
 * break (-0, NaN with a payload, subnormals, ±Infinity), so a bit-exact comparison means
 * something.
 */
const now = 1_760_000_000_000;

function awkwardFloats(n: number): Float32Array<ArrayBuffer> {
  const out = new Float32Array(n);
  const special = [-0, Number.NaN, 1.4e-45, -Infinity, Infinity, -3.4028234663852886e38];
  for (let i = 0; i < n; i++) out[i] = i < special.length ? special[i] : Math.log((i % 97) / 97 + 1e-6);
  // A NaN with a non-default payload survives only a byte-exact path.
  new Uint32Array(out.buffer)[1] = 0x7fc0beef;
  return out;
}

export function sampleEventOf(type: EventType, key: string, n = 0): AnyEventEnvelope {
  const opts = { key, producer: 'bus-conformance' };
  const ids = Int32Array.from({ length: 40 }, (_, i) => (i * 7919 + n) % 151_936);
  switch (type) {
    case 'llm_call.recorded':
      return createEvent(
        type,
        {
          callId: `call-${n}`,
          sessionId: `session-${key}`,
          rolloutId: key,
          groupId: 'group-1',
          taskId: 'task-1',
          branchId: 'branch-0',
          parentCallId: null,
          turnIndex: n,
          model: 'anvil-tiny',
          promptLength: ids.length,
          reusedPromptTokens: 0,
          promptDeltaIds: ids,
          outputIds: ids.slice(0, 12),
          outputLogprobs: awkwardFloats(12),
          outputVersions: Uint32Array.from({ length: 12 }, (_, i) => (i < 6 ? 4 : 0xffffffff)),
          finishReason: 'tool_calls',
          sampling: { temperature: 0.7, topP: 0.95, topK: 0, seed: null },
          timings: { receivedAt: now, firstTokenAt: null, finishedAt: now + 5 },
        },
        opts,
      ) as AnyEventEnvelope;
    case 'rollout.started':
      return sequencedRolloutStarted(key, n);
    case 'rollout.completed':
      return createEvent(
        type,
        {
          rolloutId: key,
          groupId: 'group-1',
          taskId: 'task-1',
          finishReason: 'completed',
          outcomeReward: 0.75,
          processRewards: [{ callId: 'call-0', value: -0.5, label: 'tool error' }],
          numCalls: 3,
          error: null,
          completedAt: now,
        },
        opts,
      ) as AnyEventEnvelope;
    case 'trajectory.ready':
      return createEvent(
        type,
        {
          trajectoryId: `traj-${key}`,
          rolloutId: key,
          groupId: 'group-1',
          taskId: 'task-1',
          callIds: ['call-0', 'call-1'],
          finishReason: 'max_context',
          reward: 1,
          advantage: -0.3333333333333333,
          lossMasked: true,
          minPolicyVersion: 3,
          maxPolicyVersion: 4,
          promptTokens: 1000,
          outputTokens: 200,
          readyAt: now,
        },
        opts,
      ) as AnyEventEnvelope;
    case 'train_batch.created':
      return createEvent(
        type,
        {
          batchId: `batch-${n}`,
          step: n,
          runId: null,
          trajectoryIds: [`traj-${key}`],
          groupIds: ['group-1'],
          samples: [0, 1].map((s) => ({
            sampleId: `sample-${s}`,
            trajectoryId: `traj-${key}`,
            groupId: 'group-1',
            advantage: -0.3333333333333333,
            lossWeight: s === 0 ? 1 : 0,
          })),
          blob: { store: 'postgres', sha256: 'cd'.repeat(32), bytes: 4096, layout: 'anvil-prefix-tree/1', nodes: 57 },
          stats: {
            trajectories: 1,
            samples: 2,
            groups: 1,
            totalTokens: 76,
            uniqueTokens: 57,
            outputTokens: 16,
            sharing: 0.25,
            staleness: { k: 2, mean: 0.5, max: 1, shareOlderThanK: 0 },
            positionLag: { mean: 1.5, max: 3 },
            outOfOrder: { mean: 0, max: 0 },
            difficulty: { batchMean: null, populationMean: 2.5 },
            lossMasked: 1,
            trainerWaitMs: null,
          },
          policyVersion: 4,
          createdAt: now,
        },
        opts,
      ) as AnyEventEnvelope;
    case 'rollout_group.settled':
      return createEvent(
        type,
        {
          groupId: 'group-1',
          taskId: 'task-1',
          status: 'dropped',
          reason: 'zero_variance',
          trajectoryIds: [`traj-${key}`],
          retryRolloutIds: [key],
        },
        opts,
      ) as AnyEventEnvelope;
    case 'train_batch.trained':
      return createEvent(
        type,
        {
          batchId: `batch-${n}`,
          batchStep: n,
          runId: 'run-1',
          trainerStep: 2 * n,
          policyVersion: 5,
          groupIds: ['group-1'],
          trajectoryIds: [`traj-${key}`],
          outcome: 'trained',
          reason: null,
          checkpointed: false,
          trainedAt: now,
        },
        opts,
      ) as AnyEventEnvelope;
    case 'evaluation.requested':
      return createEvent(
        type,
        { evalId: `eval-${n}`, taskSetId: 'set-1', policyVersion: 5, samplesPerTask: 2, requestedAt: now },
        opts,
      ) as AnyEventEnvelope;
    case 'evaluation.completed':
      return createEvent(
        type,
        {
          evalId: `eval-${n}`,
          taskSetId: 'set-1',
          policyVersion: 5,
          results: [{ taskId: 'task-1', rolloutId: key, reward: 0.8, success: true, finishReason: 'stop' }],
          successRate: 1,
          meanReward: 0.8,
          versionDrift: 0,
          startedAt: now,
          completedAt: now + 1,
        },
        opts,
      ) as AnyEventEnvelope;
    case 'weights.published':
      return createEvent(
        type,
        {
          version: 5,
          parentVersion: 4,
          step: 10,
          checkpointId: 'ckpt-5',
          checkpointUri: 'file:///tmp/ckpt-5',
          format: 'hf-safetensors',
          sha256: 'ab'.repeat(32),
          publishedAt: now,
          // odd samples are LoRA adapters over a base (v2), even ones full weights
          ...(n % 2 === 1
            ? { weights: 'lora-adapter' as const, base: { checkpointUri: 'file:///tmp/base', fingerprint: `sha256:${'cd'.repeat(32)}` } }
            : { weights: 'full' as const }),
        },
        opts,
      ) as AnyEventEnvelope;
    case 'policy_version.activated':
      return createEvent(
        type,
        { version: 5, deployment: 'proxy-0', swapPolicy: 'abort-and-resume', activatedAt: now },
        opts,
      ) as AnyEventEnvelope;
  }
}

/** One event of every registered type, all on `key`. */
export function oneOfEachType(key: string): AnyEventEnvelope[] {
  return EVENT_TYPES.map((type, i) => sampleEventOf(type, key, i));
}

/** Small, cheap event whose `sampleIndex` carries a sequence number (ordering tests). */
export function sequencedRolloutStarted(key: string, seq: number): EventEnvelope<'rollout.started'> {
  return createEvent(
    'rollout.started',
    {
      rolloutId: key,
      groupId: 'group-1',
      taskId: 'task-1',
      taskSetId: 'set-1',
      sampleIndex: seq,
      groupSize: 8,
      agent: { kind: 'white-box', name: 'conformance' },
      policyVersionAtStart: 0,
      startedAt: now + seq,
    },
    { key, producer: 'bus-conformance' },
  );
}

/**
 * A JSON-able image of a value where typed arrays become their constructor name and bytes, so
 * `toEqual` compares bit for bit (NaN payloads and -0 included).
 */
export function bitExact(value: unknown): unknown {
  if (ArrayBuffer.isView(value)) {
    return { $type: value.constructor.name, hex: Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex') };
  }
  if (Array.isArray(value)) return value.map(bitExact);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, bitExact(v)]));
  }
  return value;
}
