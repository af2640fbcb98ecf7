import { TOKEN_CONSTRAINT, type GenerateRequest, type GenerateResponse } from '@anvil/contracts';
import type { Logger } from '@anvil/observability';
import { BackendRequestError, type FinishReason, type TopLogprobs } from '../backends/backend';
import type { InferenceMetrics } from '../metrics';
import type { HealthMonitor } from '../routing/health-monitor';
import type { Replica } from '../routing/replica';
import { NoReplicaAvailableError, type Router } from '../routing/router';
import type { AdmissionGate } from '../weights/admission-gate';
import type { PolicyVersionState } from '../weights/policy-version';
import type { ActiveAttempt, ActiveAttempts } from './active-attempts';
import { RequestStop } from './request-stop';

export interface StampedChunk {
  ids: number[];
  logprobs: number[];
  versions: number[];
  topLogprobs?: TopLogprobs[];
  /** With a constraint: one TOKEN_CONSTRAINT mark per id. */
  constrained?: number[];
}

export interface GenerationServiceOptions {
  /** Replicas one request may fail on before it gives up. */
  maxAttempts: number;
  /** A generation still running after this is aborted (its tokens so far are returned). */
  requestTimeoutMs: number;
}

export class ServiceShuttingDownError extends Error {
  override readonly name = 'ServiceShuttingDownError';
}

/**
 * Runs one generation across replicas and weight versions. Each attempt goes to the replica
 * the router picks and starts from prompt + the tokens produced so far, so:
 *  - a replica that fails before the first token is simply replaced;
 *  - one that fails mid-stream is replaced and the generation RESUMES from its tokens;
 *  - a weight swap under abort-and-resume interrupts the attempt at a token boundary and the
 *    next attempt (after the load) continues under the new version.
 * Every token is stamped with the policy version active when its attempt started (the gate
 * guarantees the weights do not change under a running attempt), and tokens already produced
 * never change: their ids, logprobs and versions are final when they are handed out.
 */
export class GenerationService {
  private shuttingDown = false;

  constructor(
    private readonly router: Router,
    private readonly monitor: HealthMonitor,
    private readonly versions: PolicyVersionState,
    private readonly gate: AdmissionGate,
    private readonly active: ActiveAttempts,
    private readonly metrics: InferenceMetrics,
    private readonly logger: Logger,
    private readonly options: GenerationServiceOptions,
  ) {}

  /**
   * `signal` or `stop` (the caller's own switch, cheaper than a signal: no AbortController or
   * listener) abort the generation; either way it resolves with the tokens so far, finishReason
   * 'abort'.
   */
  async generate(
    req: GenerateRequest,
    opts: { signal?: AbortSignal; stop?: RequestStop; onChunk?: (chunk: StampedChunk) => void } = {},
  ): Promise<GenerateResponse> {
    if (this.shuttingDown) throw new ServiceShuttingDownError('the inference-proxy is shutting down');
    // The caller, shutdown and the deadline stop the request (see RequestStop for why this is
    // not linkAbort): at most one listener (on the caller's signal), none on a shared signal.
    const stop = opts.stop ?? new RequestStop();
    stop.arm(this.options.requestTimeoutMs);
    const clientSignal = opts.signal;
    const onClientAbort = () => stop.abort();
    if (clientSignal?.aborted) stop.abort();
    else clientSignal?.addEventListener('abort', onClientAbort, { once: true });
    this.running.add(stop);
    const ids: number[] = [];
    const logprobs: number[] = [];
    const versions: number[] = [];
    const topLogprobs: TopLogprobs[] | undefined = req.topLogprobs > 0 ? [] : undefined;
    const constrained: number[] | undefined = req.constraint ? [] : undefined;
    const excluded = new Set<string>();
    let cachedPromptTokens: number | null = null;
    let lastReplica = '';
    let failures = 0;
    let attemptNo = 0;

    const startedAt = performance.now();
    let firstTokenMs: number | null = null;
    const finish = (finishReason: FinishReason): GenerateResponse => {
      this.metrics.requests.inc({ outcome: finishReason });
      return {
        requestId: req.requestId,
        outputIds: ids,
        logprobs,
        versions,
        finishReason,
        promptTokens: req.promptIds.length,
        cachedPromptTokens: cachedPromptTokens ?? 0,
        replica: lastReplica,
        firstTokenMs,
        ...(topLogprobs ? { topLogprobs } : {}),
        ...(constrained ? { constrained } : {}),
      };
    };

    try {
      for (;;) {
        if (stop.aborted) return finish('abort');
        const remaining = req.maxTokens - ids.length;
        if (remaining <= 0) return finish('length');
        // Wait out a weight swap; check-and-register happens synchronously after, so a swap
        // that closes the gate either sees this attempt as active or makes it wait.
        while (!this.gate.isOpen) {
          try {
            await this.gate.wait(stop.signal);
          } catch {
            return finish('abort');
          }
        }
        let replica: Replica;
        try {
          replica = this.router.route(req.sessionId, excluded).replica;
        } catch (err) {
          if (err instanceof NoReplicaAvailableError && ids.length > 0) {
            this.logger.warn('no replica left to resume on; returning the partial output', {
              requestId: req.requestId,
              tokens: ids.length,
            });
            return finish('abort');
          }
          throw err;
        }
        // vLLM and SGLang compile a grammar from its start: a constrained call cannot continue
        // there after tokens produced by an earlier attempt (see InferenceBackend.resumesConstraints).
        if (req.constraint && ids.length > 0 && !replica.backend.resumesConstraints) {
          this.logger.warn('a constrained generation cannot resume on this backend; returning the partial output', {
            requestId: req.requestId,
            replica: replica.id,
            tokens: ids.length,
          });
          return finish('abort');
        }
        const version = this.versions.current;
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
        this.active.add(attempt);
        this.metrics.inFlight.inc({ replica: replica.id });
        lastReplica = replica.id;
        replica.requests++;
        const producedBefore = ids.length;
        const prompt = producedBefore ? [...req.promptIds, ...ids] : req.promptIds;
        let result;
        try {
          result = await replica.backend.generate(
            {
              requestId: `${req.requestId}.${attemptNo++}`,
              promptIds: prompt,
              sampling: {
                maxTokens: remaining,
                temperature: req.temperature,
                topP: req.topP,
                topK: req.topK,
                seed: req.seed,
                stopIds: req.stopIds,
                topLogprobs: req.topLogprobs,
              },
              ...(req.constraint ? { constraint: { grammar: req.constraint.grammar, generatedIds: [...ids] } } : {}),
            },
            {
              signal: attemptAbort.signal,
              onTokens: (chunk) => {
                if (firstTokenMs === null && chunk.ids.length > 0) firstTokenMs = Math.round((performance.now() - startedAt) * 1000) / 1000;
                const stamped = chunk.ids.map(() => version);
                ids.push(...chunk.ids);
                logprobs.push(...chunk.logprobs);
                versions.push(...stamped);
                if (topLogprobs) topLogprobs.push(...(chunk.topLogprobs ?? chunk.ids.map(() => ({ ids: [], logprobs: [] }))));
                const marks = constrained ? (chunk.constrained ?? chunk.ids.map(() => TOKEN_CONSTRAINT.constrained)) : undefined;
                if (marks) constrained?.push(...marks);
                replica.tokensGenerated += chunk.ids.length;
                this.metrics.tokens.inc({ replica: replica.id }, chunk.ids.length);
                opts.onChunk?.({
                  ids: chunk.ids,
                  logprobs: chunk.logprobs,
                  versions: stamped,
                  ...(topLogprobs ? { topLogprobs: chunk.topLogprobs ?? chunk.ids.map(() => ({ ids: [], logprobs: [] })) } : {}),
                  ...(marks ? { constrained: marks } : {}),
                });
              },
            },
          );
        } catch (err) {
          if (stop.aborted) return finish('abort');
          if (interrupted) continue;
          if (err instanceof BackendRequestError) throw err;
          failures++;
          replica.failures++;
          excluded.add(replica.id);
          this.monitor.recordFailure(replica, (err as Error).message);
          const stage = ids.length > 0 ? 'mid_stream' : 'before_first_token';
          this.metrics.failovers.inc({ stage });
          this.logger.warn('replica failed a generation; failing over', {
            requestId: req.requestId,
            replica: replica.id,
            stage,
            tokens: ids.length,
            err,
          });
          if (failures >= this.options.maxAttempts) {
            if (ids.length > 0) return finish('abort');
            throw err;
          }
          continue;
        } finally {
          stop.endAttempt(attemptAbort);
          this.active.remove(attempt);
          this.metrics.inFlight.dec({ replica: replica.id });
        }
        if (cachedPromptTokens === null) cachedPromptTokens = result.cachedPromptTokens;
        replica.promptTokens += prompt.length;
        replica.cachedPromptTokens += result.cachedPromptTokens;
        if (result.finishReason !== 'abort') return finish(result.finishReason);
        if (stop.aborted) return finish('abort');
        if (interrupted) continue;
        // The engine aborted on its own (restart, its own weight update): resume elsewhere.
        failures++;
        excluded.add(replica.id);
        this.metrics.failovers.inc({ stage: ids.length > 0 ? 'mid_stream' : 'before_first_token' });
        if (failures >= this.options.maxAttempts) return finish('abort');
      }
    } catch (err) {
      this.metrics.requests.inc({ outcome: 'error' });
      throw err;
    } finally {
      stop.dispose();
      clientSignal?.removeEventListener('abort', onClientAbort);
      this.running.delete(stop);
    }
  }

  /** The stop switches of the generations running now, for shutdown to abort. */
  private readonly running = new Set<RequestStop>();

  /**
   * Graceful shutdown: refuse new generations, let running ones finish within `graceMs`, then
   * abort the rest (they return their tokens with finishReason 'abort', so the caller can resume
   * them on another proxy instance).
   */
  async shutdown(graceMs: number): Promise<void> {
    this.shuttingDown = true;
    const drained = await this.active.whenIdle(graceMs);
    if (!drained) {
      this.logger.warn('shutdown: aborting generations still running', { count: this.active.count });
      for (const stop of this.running) stop.abort();
      await this.active.whenIdle(5_000);
    }
  }
}
