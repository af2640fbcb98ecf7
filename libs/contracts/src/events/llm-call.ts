import { z } from 'zod';
import { float32Array, int32Array, uint32Array, uint8Array } from '../codec/typed-array-schemas';
import { id, timestampMs } from './common';

export const FINISH_REASONS_LLM = ['stop', 'length', 'tool_calls', 'abort', 'content_filter'] as const;

/**
 * One answered LLM call, recorded token-exactly (DESIGN "Token-exact capture"):
 * the prompt ids the engine saw, the sampled ids, their logprobs under the sampling
 * distribution and the policy version that produced each token. One call = one sample.
 */
export const llmCallRecordedV1 = z
  .object({
    callId: id(),
    sessionId: id(),
    rolloutId: id(),
    groupId: id(),
    taskId: id(),
    /** Branch inside the session: a rewritten history starts a new branch. */
    branchId: id(),
    /** The call this one extends token-exactly, or null when it starts a branch. */
    parentCallId: id().nullable(),
    turnIndex: z.number().int().nonnegative(),
    model: z.string().min(1),
    promptIds: int32Array(),
    /** How many leading prompt ids were reused verbatim from the parent call (prompt + output). */
    reusedPromptTokens: z.number().int().nonnegative(),
    outputIds: int32Array(),
    outputLogprobs: float32Array(),
    outputVersions: uint32Array(),
    finishReason: z.enum(FINISH_REASONS_LLM),
    sampling: z.object({
      temperature: z.number().nonnegative(),
      topP: z.number().gt(0).lte(1),
      topK: z.number().int().nonnegative(),
      seed: z.number().int().nullable(),
    }),
    timings: z.object({
      receivedAt: timestampMs(),
      firstTokenAt: timestampMs().nullable(),
      finishedAt: timestampMs(),
    }),
  })
  .superRefine((v, ctx) => {
    const n = v.outputIds.length;
    if (v.outputLogprobs.length !== n || v.outputVersions.length !== n) {
      ctx.addIssue({
        code: 'custom',
        message: `outputIds (${n}), outputLogprobs (${v.outputLogprobs.length}) and outputVersions (${v.outputVersions.length}) must have equal length`,
      });
    }
    if (v.reusedPromptTokens > v.promptIds.length) {
      ctx.addIssue({ code: 'custom', message: 'reusedPromptTokens exceeds promptIds.length' });
    }
    if (v.parentCallId === null && v.reusedPromptTokens !== 0) {
      ctx.addIssue({ code: 'custom', message: 'a call that starts a branch reuses no prompt tokens' });
    }
  });
export type LlmCallRecordedV1 = z.infer<typeof llmCallRecordedV1>;

const llmCallCommon = {
  callId: id(),
  sessionId: id(),
  rolloutId: id(),
  groupId: id(),
  taskId: id(),
  branchId: id(),
  parentCallId: id().nullable(),
  turnIndex: z.number().int().nonnegative(),
  model: z.string().min(1),
};

/**
 * v2: linear in unique tokens (DESIGN "Linear in unique tokens"). The event carries only the
 * prompt ids AFTER the prefix it reuses from its parent: the full prompt is
 * `(parent's full prompt ++ parent's outputIds)[0 : reusedPromptTokens] ++ promptDeltaIds`,
 * `promptLength` long. A call that starts a branch (parentCallId null) reuses nothing, so its
 * delta is its whole prompt. A consumer that needs full prompts rebuilds them along the chain
 * (see `PromptChain`); v1 events (whole prompts) stay readable and convert with `llmCallV1ToV2`.
 */
export const llmCallRecordedV2 = z
  .object({
    ...llmCallCommon,
    /** Length of the full prompt the engine saw (reusedPromptTokens + promptDeltaIds.length). */
    promptLength: z.number().int().nonnegative(),
    /** How many leading prompt ids are the parent call's prompt + output ids (a prefix of them). */
    reusedPromptTokens: z.number().int().nonnegative(),
    /** The prompt ids after the reused prefix. */
    promptDeltaIds: int32Array(),
    outputIds: int32Array(),
    outputLogprobs: float32Array(),
    outputVersions: uint32Array(),
    finishReason: z.enum(FINISH_REASONS_LLM),
    sampling: llmCallRecordedV1Sampling(),
    timings: z.object({
      receivedAt: timestampMs(),
      firstTokenAt: timestampMs().nullable(),
      finishedAt: timestampMs(),
    }),
  })
  .superRefine((v, ctx) => {
    const n = v.outputIds.length;
    if (v.outputLogprobs.length !== n || v.outputVersions.length !== n) {
      ctx.addIssue({
        code: 'custom',
        path: ['outputIds'],
        message: `outputIds (${n}), outputLogprobs (${v.outputLogprobs.length}) and outputVersions (${v.outputVersions.length}) must have equal length`,
      });
    }
    if (v.reusedPromptTokens + v.promptDeltaIds.length !== v.promptLength) {
      ctx.addIssue({
        code: 'custom',
        path: ['promptLength'],
        message: `promptLength (${v.promptLength}) must equal reusedPromptTokens (${v.reusedPromptTokens}) + promptDeltaIds.length (${v.promptDeltaIds.length})`,
      });
    }
    if (v.parentCallId === null && v.reusedPromptTokens !== 0) {
      ctx.addIssue({ code: 'custom', path: ['reusedPromptTokens'], message: 'a call that starts a branch reuses no prompt tokens' });
    }
  });
export type LlmCallRecordedV2 = z.infer<typeof llmCallRecordedV2>;

/**
 * v3: v2 + `outputConstraint`, how each output token was sampled under constrained decoding (a
 * forced tool call): 0 freely, 1 within an allowed-token mask of several ids, 2 forced (the mask
 * allowed only that id). Absent when no token was constrained. `outputLogprobs` of constrained
 * tokens are those of the constrained distribution the engine sampled from (the policy restricted
 * to the mask and renormalised; 0 for a forced token), like temperature and top-k/top-p they are
 * the behaviour policy's. A v2 event reads as v3 with nothing constrained.
 */
export const llmCallRecordedV3 = llmCallRecordedV2
  .safeExtend({
    outputConstraint: uint8Array().optional(),
  })
  .superRefine((v, ctx) => {
    if (v.outputConstraint !== undefined && v.outputConstraint.length !== v.outputIds.length)
      ctx.addIssue({
        code: 'custom',
        path: ['outputConstraint'],
        message: `outputConstraint (${v.outputConstraint.length}) must have one entry per output id (${v.outputIds.length})`,
      });
  });
export type LlmCallRecordedV3 = z.infer<typeof llmCallRecordedV3>;

function llmCallRecordedV1Sampling() {
  return z.object({
    temperature: z.number().nonnegative(),
    topP: z.number().gt(0).lte(1),
    topK: z.number().int().nonnegative(),
    seed: z.number().int().nullable(),
  });
}

/** A v1 payload (whole prompt) as v2 (delta after the reused prefix). */
export function llmCallV1ToV2(v1: LlmCallRecordedV1): LlmCallRecordedV2 {
  const { promptIds, ...rest } = v1;
  return {
    ...rest,
    promptLength: promptIds.length,
    promptDeltaIds: promptIds.slice(v1.reusedPromptTokens) as LlmCallRecordedV2['promptDeltaIds'],
  };
}

/** A whole prompt as v2: what a producer that knows the full prompt and the reused count publishes. */
export function llmCallDelta(
  promptIds: ArrayLike<number>,
  reusedPromptTokens: number,
): Pick<LlmCallRecordedV2, 'promptLength' | 'reusedPromptTokens' | 'promptDeltaIds'> {
  const delta = new Int32Array(Math.max(0, promptIds.length - reusedPromptTokens));
  for (let i = 0; i < delta.length; i++) delta[i] = promptIds[reusedPromptTokens + i];
  return { promptLength: promptIds.length, reusedPromptTokens, promptDeltaIds: delta };
}

export class PromptChainError extends Error {
  override name = 'PromptChainError';
  constructor(
    readonly callId: string,
    readonly field: 'parentCallId' | 'reusedPromptTokens',
    message: string,
  ) {
    super(message);
  }
}

/**
 * Rebuilds full prompts from v2 deltas in arrival order (a parent before its children), for
 * consumers that need them (tests, a v1 re-publisher). Keeps each call's prompt + output; bounded
 * by `maxCalls` (oldest forgotten first). The Data Pool does not use it: it stores deltas and
 * rebuilds in SQL.
 */
export class PromptChain {
  private readonly sequences = new Map<string, Int32Array>();
  constructor(private readonly maxCalls = 100_000) {}

  /** The full prompt of `call`; throws PromptChainError when its parent is unknown or too short. */
  fullPrompt(call: LlmCallRecordedV2 | LlmCallRecordedV1): Int32Array {
    let prompt: Int32Array;
    if ('promptIds' in call) prompt = call.promptIds as Int32Array;
    else if (call.reusedPromptTokens === 0) prompt = call.promptDeltaIds as Int32Array;
    else {
      const parent = call.parentCallId === null ? undefined : this.sequences.get(call.parentCallId);
      if (!parent)
        throw new PromptChainError(call.callId, 'parentCallId', `parent call ${String(call.parentCallId)} of ${call.callId} is unknown`);
      if (parent.length < call.reusedPromptTokens) {
        throw new PromptChainError(
          call.callId,
          'reusedPromptTokens',
          `${call.callId} reuses ${call.reusedPromptTokens} tokens but its parent has ${parent.length}`,
        );
      }
      prompt = new Int32Array(call.promptLength);
      prompt.set(parent.subarray(0, call.reusedPromptTokens));
      prompt.set(call.promptDeltaIds, call.reusedPromptTokens);
    }
    const seq = new Int32Array(prompt.length + call.outputIds.length);
    seq.set(prompt);
    seq.set(call.outputIds, prompt.length);
    this.sequences.set(call.callId, seq);
    if (this.sequences.size > this.maxCalls) this.sequences.delete(this.sequences.keys().next().value as string);
    return prompt;
  }

  /** A v2 payload with its full prompt, in v1 shape. */
  materialize(call: LlmCallRecordedV2 | LlmCallRecordedV1): LlmCallRecordedV1 {
    const promptIds = this.fullPrompt(call);
    if ('promptIds' in call) return call;
    const { promptDeltaIds: _delta, promptLength: _len, ...rest } = call;
    return { ...rest, promptIds: promptIds as LlmCallRecordedV1['promptIds'] };
  }
}
