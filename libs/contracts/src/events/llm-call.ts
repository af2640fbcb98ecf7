import { z } from 'zod';
import { float32Array, int32Array, uint32Array } from '../codec/typed-array-schemas';
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
      ctx.addIssue({ code: 'custom', message: `outputIds (${n}), outputLogprobs (${v.outputLogprobs.length}) and outputVersions (${v.outputVersions.length}) must have equal length` });
    }
    if (v.reusedPromptTokens > v.promptIds.length) {
      ctx.addIssue({ code: 'custom', message: 'reusedPromptTokens exceeds promptIds.length' });
    }
    if (v.parentCallId === null && v.reusedPromptTokens !== 0) {
      ctx.addIssue({ code: 'custom', message: 'a call that starts a branch reuses no prompt tokens' });
    }
  });
export type LlmCallRecordedV1 = z.infer<typeof llmCallRecordedV1>;

