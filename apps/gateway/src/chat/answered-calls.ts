import { appendFingerprint, fingerprintMessages } from '@anvil/tokenizer';
import type { AnsweredCall } from '../capture/call-recorder';
import type { GenerationResult } from '../generation/generation-runner';
import type { AssembledAnswer } from './answer-assembly';
import type { PreparedCall } from './prepared-call';

/**
 * What is recorded for each choice: its tokens, log-probs, versions and timings for the
 * llm_call.recorded event, and (chat) the capture state the session's next call may extend.
 */
export function answeredCalls(
  call: PreparedCall,
  generations: readonly GenerationResult[],
  answer: AssembledAnswer,
  finishedAt: number,
): AnsweredCall[] {
  const { session, plan, branchId } = call;
  return generations.map((g, i) => {
    const reply = answer.replies[i];
    return {
      callId: call.callIds[i],
      branchId,
      parentCallId: plan.parent?.callId ?? null,
      promptIds: plan.promptIds,
      reusedPromptTokens: plan.reusedTokens,
      outputIds: g.outputIds,
      logprobs: g.logprobs,
      versions: g.versions,
      ...(g.constrained ? { constrained: g.constrained } : {}),
      finishReason: g.finishReason === 'abort' ? 'abort' : answer.finishReasons[i],
      sampling: { ...call.sampling, seed: call.sampling.seed === null ? null : call.sampling.seed + i },
      timings: { receivedAt: call.receivedAt, firstTokenAt: g.firstTokenAt, finishedAt },
      capture: reply
        ? {
            callId: call.callIds[i],
            sessionId: session.id,
            branchId,
            parentCallId: plan.parent?.callId ?? null,
            // The prefix hashes chain, and plan.messages fingerprint as the request's messages do
            // (the stored reply in place of its echo is checked equal by the same canonical form).
            replyFingerprint: call.fingerprint
              ? appendFingerprint(call.fingerprint, reply.message)
              : (fingerprintMessages([...plan.messages, reply.message], call.tools, call.extra).at(-1) as string),
            messages: plan.messages,
            assistantMessage: reply.message,
            tools: call.tools,
            templateExtra: call.extra,
            promptIds: plan.promptIds,
            outputIds: g.outputIds,
            promptText: plan.text,
          }
        : null,
    };
  });
}
