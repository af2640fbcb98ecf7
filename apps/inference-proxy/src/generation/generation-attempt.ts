import type { GenerateRequest } from '@anvil/contracts';
import { BackendRequestError, type BackendGenerateRequest, type FinishReason } from '../backends/backend';
import type { InferenceMetrics } from '../metrics';
import type { Replica } from '../routing/replica';
import type { PolicyVersionState } from '../weights/policy-version';
import type { ActiveAttempt, ActiveAttempts } from './active-attempts';
import type { Failover } from './failover';
import type { GenerationOutput, StampedChunk } from './generation-output';
import type { RequestStop } from './request-stop';

export interface AttemptDeps {
  versions: PolicyVersionState;
  active: ActiveAttempts;
  metrics: InferenceMetrics;
}

export interface AttemptInput {
  req: GenerateRequest;
  replica: Replica;
  /** Numbers the attempts of one generation (the backend's request id is `${requestId}.${attemptNo}`). */
  attemptNo: number;
  output: GenerationOutput;
  stop: RequestStop;
  failover: Failover;
  onChunk?: (chunk: StampedChunk) => void;
}

/** How an attempt ended, which decides what the generation does next. */
export type AttemptOutcome =
  /** The engine finished the generation (stop or length). */
  | { kind: 'finished'; finishReason: Exclude<FinishReason, 'abort'> }
  /** The request stopped (the caller, shutdown, the deadline). */
  | { kind: 'stopped' }
  /** A weight swap interrupted it: the next attempt resumes under the new weights. */
  | { kind: 'interrupted' }
  /** The engine aborted on its own (a restart, its own weight update). */
  | { kind: 'engine_aborted' }
  /** The replica failed it (already counted in the failover). */
  | { kind: 'failed'; err: Error };

/**
 * One attempt on one replica, from the prompt plus the tokens earlier attempts produced, its
 * tokens appended to `output` stamped with the policy version active when it started. Called
 * right after the admission gate was seen open: everything up to the backend call is
 * synchronous, so a weight swap closing the gate afterwards finds this attempt registered as
 * active (and interrupts or drains it). A BackendRequestError (the engine refused the request)
 * is thrown: another replica would refuse it too.
 */
export async function runAttempt(d: AttemptDeps, input: AttemptInput): Promise<AttemptOutcome> {
  const { req, replica, output, stop } = input;
  const version = d.versions.current;
  // Aborted by the request stopping or by a weight swap interrupting this attempt.
  const attemptAbort = stop.beginAttempt();
  let interrupted = false;
  const attempt: ActiveAttempt = {
    replicaId: replica.id,
    // an attempt that could not be resumed finishes on the weights it started with
    weightSwap: req.constraint && !replica.backend.resumesConstraints ? 'finish' : req.weightSwap,
    interruptForSwap: () => {
      interrupted = true;
      attemptAbort.abort();
    },
  };
  d.active.add(attempt);
  d.metrics.inFlight.inc({ replica: replica.id });
  output.attemptedOn(replica.id);
  replica.requests++;
  const request = attemptRequest(req, input.attemptNo, output.produced());
  let result;
  try {
    result = await replica.backend.generate(request, {
      signal: attemptAbort.signal,
      onTokens: (chunk) => {
        const stamped = output.append(chunk, version);
        replica.tokensGenerated += chunk.ids.length;
        d.metrics.tokens.inc({ replica: replica.id }, chunk.ids.length);
        input.onChunk?.(stamped);
      },
    });
  } catch (err) {
    if (stop.aborted) return { kind: 'stopped' };
    if (interrupted) return { kind: 'interrupted' };
    if (err instanceof BackendRequestError) throw err;
    // Into the replica's health at once, before anything else can be routed to it.
    input.failover.replicaFailed(replica, err as Error, req.requestId, output.count);
    return { kind: 'failed', err: err as Error };
  } finally {
    stop.endAttempt(attemptAbort);
    d.active.remove(attempt);
    d.metrics.inFlight.dec({ replica: replica.id });
  }
  output.promptServed(result.cachedPromptTokens);
  replica.promptTokens += request.promptIds.length;
  replica.cachedPromptTokens += result.cachedPromptTokens;
  if (result.finishReason !== 'abort') return { kind: 'finished', finishReason: result.finishReason };
  if (stop.aborted) return { kind: 'stopped' };
  if (interrupted) return { kind: 'interrupted' };
  return { kind: 'engine_aborted' };
}

/**
 * What the backend is asked for: the request's prompt followed by the tokens produced so far
 * (`produced`), at most what is left of maxTokens; a constraint continues after those tokens
 * (the engine replays them through the grammar).
 */
export function attemptRequest(req: GenerateRequest, attemptNo: number, produced: number[]): BackendGenerateRequest {
  return {
    requestId: `${req.requestId}.${attemptNo}`,
    promptIds: produced.length ? [...req.promptIds, ...produced] : req.promptIds,
    sampling: {
      maxTokens: req.maxTokens - produced.length,
      temperature: req.temperature,
      topP: req.topP,
      topK: req.topK,
      seed: req.seed,
      stopIds: req.stopIds,
      topLogprobs: req.topLogprobs,
    },
    ...(req.constraint ? { constraint: { grammar: req.constraint.grammar, generatedIds: produced } } : {}),
  };
}
