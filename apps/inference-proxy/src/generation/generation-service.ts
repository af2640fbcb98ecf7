import type { GenerateRequest, GenerateResponse } from '@anvil/contracts';
import type { Logger } from '@anvil/observability';
import type { FinishReason } from '../backends/backend';
import type { InferenceMetrics } from '../metrics';
import type { HealthMonitor } from '../routing/health-monitor';
import type { Router } from '../routing/router';
import type { AdmissionGate } from '../weights/admission-gate';
import type { PolicyVersionState } from '../weights/policy-version';
import type { ActiveAttempts } from './active-attempts';
import { Failover, type FailoverDeps } from './failover';
import { runAttempt, type AttemptDeps } from './generation-attempt';
import { GenerationOutput, type StampedChunk } from './generation-output';
import { chooseReplica } from './replica-choice';
import { RequestStop } from './request-stop';

export type { StampedChunk } from './generation-output';

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
  /** The stop switches of the generations running now, for shutdown to abort. */
  private readonly running = new Set<RequestStop>();
  private readonly attemptDeps: AttemptDeps;
  private readonly failoverDeps: FailoverDeps;

  constructor(
    private readonly router: Router,
    monitor: HealthMonitor,
    versions: PolicyVersionState,
    private readonly gate: AdmissionGate,
    private readonly active: ActiveAttempts,
    private readonly metrics: InferenceMetrics,
    private readonly logger: Logger,
    private readonly options: GenerationServiceOptions,
  ) {
    this.attemptDeps = { versions, active, metrics };
    this.failoverDeps = { monitor, metrics, logger };
  }

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
    const stop = opts.stop ?? new RequestStop();
    const unwatch = this.watch(stop, opts.signal);
    const output = new GenerationOutput(req);
    try {
      const finishReason = await this.attempts(req, output, stop, opts.onChunk);
      this.metrics.requests.inc({ outcome: finishReason });
      return output.response(req, finishReason);
    } catch (err) {
      this.metrics.requests.inc({ outcome: 'error' });
      throw err;
    } finally {
      unwatch();
    }
  }

  /**
   * Arms the request's deadline, lets the caller's signal stop it and lists it for shutdown;
   * returns the undo. The caller, shutdown and the deadline stop the request (see RequestStop
   * for why this is not linkAbort): at most one listener (on the caller's signal), none on a
   * shared signal.
   */
  private watch(stop: RequestStop, signal: AbortSignal | undefined): () => void {
    stop.arm(this.options.requestTimeoutMs);
    const onClientAbort = () => stop.abort();
    if (signal?.aborted) stop.abort();
    else signal?.addEventListener('abort', onClientAbort, { once: true });
    this.running.add(stop);
    return () => {
      stop.dispose();
      signal?.removeEventListener('abort', onClientAbort);
      this.running.delete(stop);
    };
  }

  /**
   * Attempts on replicas until one finishes the generation, the request stops, maxTokens are
   * produced or fail-over gives up (with tokens: 'abort', the partial output; without: the last
   * failure is thrown). Returns the finish reason.
   */
  private async attempts(
    req: GenerateRequest,
    output: GenerationOutput,
    stop: RequestStop,
    onChunk: ((chunk: StampedChunk) => void) | undefined,
  ): Promise<FinishReason> {
    const failover = new Failover(this.options.maxAttempts, this.failoverDeps);
    for (let attemptNo = 0; ; attemptNo++) {
      if (stop.aborted) return 'abort';
      if (req.maxTokens - output.count <= 0) return 'length';
      // Wait out a weight swap. The gate is checked again after each wait and everything from
      // that check to the attempt's registration is synchronous, so a swap that closes the
      // gate either sees this attempt as active or makes it wait.
      while (!this.gate.isOpen) if (!(await this.weightsLoaded(stop))) return 'abort';
      const replica = chooseReplica(this.router, this.logger, req, failover.excluded, output.count);
      if (!replica) return 'abort';
      const outcome = await runAttempt(this.attemptDeps, { req, replica, attemptNo, output, stop, failover, onChunk });
      switch (outcome.kind) {
        case 'finished':
          return outcome.finishReason;
        case 'stopped':
          return 'abort';
        case 'interrupted':
          continue;
        case 'engine_aborted':
          // Resumed elsewhere.
          failover.engineAborted(replica, output.count);
          if (failover.exhausted) return 'abort';
          continue;
        case 'failed':
          if (!failover.exhausted) continue;
          if (output.count > 0) return 'abort';
          throw outcome.err;
      }
    }
  }

  /** Waits for the admission gate to open (a weight swap done); false when the request stopped meanwhile. */
  private async weightsLoaded(stop: RequestStop): Promise<boolean> {
    try {
      await this.gate.wait(stop.signal);
      return true;
    } catch {
      return false;
    }
  }

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
