import type { GenerateRequestInput } from '@anvil/contracts';
import { InferenceProxyError, type InferenceProxyClient } from '@anvil/inference-client';
import type { Logger } from '@anvil/observability';
import { linkAbort } from '@anvil/service-kit';
import { runGeneration, type GenerationResult } from '../generation/generation-runner';
import { generationError } from './generation-error';
import type { PreparedCall } from './prepared-call';

export interface ChoiceGenerationDeps {
  client: InferenceProxyClient;
  logger: Logger;
}

export interface ChoiceGenerationOptions {
  /** The agent's hang-up: stops every choice. */
  signal: AbortSignal;
  /** Sees each choice's text as it grows. */
  onText?: (index: number, text: string) => void;
}

/**
 * Generates a call's n choices in parallel at the inference-proxy. The first one to fail stops
 * the others, and the failure is answered as a GatewayError (see generationError).
 */
export async function generateChoices(
  d: ChoiceGenerationDeps,
  call: PreparedCall,
  opts: ChoiceGenerationOptions,
): Promise<GenerationResult[]> {
  const failFast = new AbortController();
  const link = linkAbort([opts.signal, failFast.signal]);
  const signal = link.signal;
  const tasks = call.callIds.map(async (callId, index) => {
    try {
      return await runGeneration({
        client: d.client,
        request: generateRequest(call, callId, index),
        tokenizer: call.model.format.tokenizer,
        stop: call.stop,
        signal,
        onText: opts.onText && ((t) => opts.onText?.(index, t)),
      });
    } catch (err) {
      if (!failFast.signal.aborted && !opts.signal.aborted && !(err instanceof InferenceProxyError && err.status < 500))
        d.logger.warn('generation failed at the inference-proxy', { sessionId: call.session.id, err });
      failFast.abort();
      throw err;
    }
  });
  try {
    return await Promise.all(tasks);
  } catch (err) {
    await Promise.allSettled(tasks);
    throw generationError(err, opts.signal.aborted);
  } finally {
    link.dispose();
  }
}

/** What the inference-proxy is asked for choice `index`, with the call's constraint (a forced tool call) and weight-swap choice. */
export function generateRequest(call: PreparedCall, callId: string, index: number): GenerateRequestInput {
  return {
    requestId: callId,
    sessionId: call.session.id,
    promptIds: call.plan.promptIds,
    maxTokens: call.maxTokens,
    temperature: call.sampling.temperature,
    topP: call.sampling.topP,
    topK: call.sampling.topK,
    // n independent samples: with a seed, choice i uses seed + i (the same seed would give n equal samples).
    seed: call.sampling.seed === null ? null : call.sampling.seed + index,
    stopIds: call.model.format.stopTokenIds,
    ...(call.topLogprobs > 0 ? { topLogprobs: call.topLogprobs } : {}),
    ...(call.constraint ? { constraint: call.constraint } : {}),
    // The session's choice (its task set's): finish on the old weights or abort and resume under the new ones.
    ...(call.session.weightSwap ? { weightSwap: call.session.weightSwap } : {}),
  };
}
