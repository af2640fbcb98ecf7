import type { LoopResult } from '../agents/white-box';
import { runVerifier, VerifierError, type VerifierDeps } from '../verifiers/verifiers';
import type { AgentRun } from './agent-steps/agent-step';
import type { RolloutContext, RolloutResult } from './rollout-context';

/**
 * Scores an agent's run with its task's verifier; a run that was aborted or failed is not scored.
 * A verifier that throws, hangs or answers garbage ends the rollout as env_error.
 */
export async function verifyStep(ctx: RolloutContext, run: AgentRun, deps: VerifierDeps): Promise<RolloutResult> {
  const result: RolloutResult = {
    finishReason: run.finishReason,
    outcomeReward: null,
    processRewards: [],
    numCalls: run.numCalls,
    error: run.error,
    success: null,
    ...(run.callsRefused ? { callsRefused: run.callsRefused } : {}),
  };
  if (result.finishReason === 'aborted' || result.finishReason === 'env_error') return result;
  try {
    const v = await runVerifier(
      ctx.verifier,
      ctx.spec.env,
      { task: ctx.task, transcript: run.transcript, agent: run.agent, ...(run.calls ? { calls: run.calls } : {}) },
      deps,
      ctx.stopSignal,
    );
    const processRewards = v.processRewards
      ? attachProcessRewards(v.processRewards, run.loop, run.calls ?? [], ctx.verifier.kind === 'env')
      : [];
    return { ...result, outcomeReward: v.outcomeReward, success: v.success, processRewards };
  } catch (err) {
    return { ...result, finishReason: 'env_error', error: (err as Error).message };
  }
}

/**
 * Process rewards onto call ids. White-box: per assistant turn of the main loop (its step
 * calls). Black-box: per call the gateway recorded, in order. A verifier that sees those calls
 * (`calls`) and returns more values than there are is answering garbage. An environment's
 * verifier scores the agent's own transcript, one value per assistant turn there: they are placed
 * only when that transcript has one turn per recorded call; otherwise (an agent that left only its
 * answer, say) they cannot be, and the rollout has none.
 */
function attachProcessRewards(
  values: number[],
  loop: LoopResult | undefined,
  calls: { callId: string }[],
  fromTranscript: boolean,
): { callId: string; value: number }[] {
  if (loop) {
    return values.flatMap((value, i) => {
      const callId = loop.stepCallIds[i];
      return callId ? [{ callId, value }] : [];
    });
  }
  if (fromTranscript && values.length !== calls.length) return [];
  if (values.length > calls.length)
    throw new VerifierError(`verifier answered garbage: ${values.length} process rewards for ${calls.length} recorded calls`);
  return values.map((value, i) => ({ callId: calls[i].callId, value }));
}
