import { createEvent, type EventEnvelope } from '../envelope';

/**
 * A realistic llm_call.recorded event with `promptTokens` prompt ids and `outputTokens`
 * sampled ids. Shared by tests and benchmarks so they exercise the same payload shape.
 */
export function sampleLlmCallEvent(opts: {
  promptTokens: number;
  outputTokens: number;
  rolloutId?: string;
  seed?: number;
  turnIndex?: number;
}): EventEnvelope<'llm_call.recorded'> {
  let state = (opts.seed ?? 1) >>> 0 || 1;
  const rand = () => {
    // xorshift32: deterministic, cheap, good enough for fixture data.
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 0x1_0000_0000;
  };
  const promptIds = new Int32Array(opts.promptTokens).map(() => Math.floor(rand() * 151_936));
  const outputIds = new Int32Array(opts.outputTokens).map(() => Math.floor(rand() * 151_936));
  const outputLogprobs = new Float32Array(opts.outputTokens).map(() => Math.log(rand() + 1e-9));
  const outputVersions = new Uint32Array(opts.outputTokens).fill(7);
  const rolloutId = opts.rolloutId ?? `rollout-${Math.floor(rand() * 1e9)}`;
  const now = Date.now();
  return createEvent(
    'llm_call.recorded',
    {
      callId: `call-${Math.floor(rand() * 1e12)}`,
      sessionId: `session-${rolloutId}`,
      rolloutId,
      groupId: 'group-1',
      taskId: 'task-1',
      branchId: 'branch-0',
      parentCallId: null,
      turnIndex: opts.turnIndex ?? 0,
      model: 'anvil-tiny',
      promptLength: promptIds.length,
      reusedPromptTokens: 0,
      promptDeltaIds: promptIds,
      outputIds,
      outputLogprobs,
      outputVersions,
      finishReason: 'stop',
      sampling: { temperature: 1, topP: 1, topK: 0, seed: null },
      timings: { receivedAt: now, firstTokenAt: now + 1, finishedAt: now + 2 },
    },
    { key: rolloutId, producer: 'fixture' },
  );
}
