import type { WeightSwapChoice } from '@anvil/contracts';
import type { Logger } from '@anvil/observability';
import type { ActiveAttempts } from '../generation/active-attempts';
import type { LoadWeightsRequest } from '../backends/backend';
import type { InferenceMetrics } from '../metrics';
import type { Replica } from '../routing/replica';
import type { AdmissionGate } from './admission-gate';
import type { PolicyVersionState } from './policy-version';

export type WeightSwapPolicy = 'drain-then-swap' | 'abort-and-resume';

export interface WeightSwapOptions {
  policy: WeightSwapPolicy;
  /** drain-then-swap: generations still running after this are interrupted and resumed (0 = wait forever). */
  drainTimeoutMs: number;
}

export type SwapOutcome =
  { status: 'activated'; loaded: string[]; failed: string[]; seconds: number } | { status: 'ignored'; reason: string };

/**
 * Moves every replica to a new policy version:
 *  1. close the admission gate: new attempts WAIT (requests do not fail);
 *  2. interrupt the running attempts that abort and resume at a token boundary (they resume
 *     later from prompt + partial output; their tokens so far keep the old version and
 *     logprobs) and wait until the others finish (past drainTimeoutMs, interrupt them too).
 *     Which do is each request's `weightSwap` (its session's choice, per task set), else the
 *     policy: abort-and-resume interrupts them all, drain-then-swap none;
 *  3. load the checkpoint on every routable replica in parallel;
 *  4. stamp the new version and open the gate.
 * A replica that fails the load (or is down) is marked stale and stays out of rotation until
 * it has loaded the active weights (HealthMonitor -> resync). If NO replica loaded, nothing
 * changed: the version is not activated and the error goes back to the bus, which retries.
 * Swaps run one at a time; an older or already-active version is ignored.
 */
export class WeightSwapper {
  private chain: Promise<unknown> = Promise.resolve();
  private swapping = false;

  constructor(
    private readonly replicas: () => readonly Replica[],
    private readonly versions: PolicyVersionState,
    private readonly gate: AdmissionGate,
    private readonly active: ActiveAttempts,
    private readonly options: WeightSwapOptions,
    private readonly metrics: InferenceMetrics,
    private readonly logger: Logger,
  ) {}

  get policy(): WeightSwapPolicy {
    return this.options.policy;
  }

  get inProgress(): boolean {
    return this.swapping;
  }

  apply(target: LoadWeightsRequest): Promise<SwapOutcome> {
    const run = this.chain.then(() => this.swap(target));
    this.chain = run.catch(() => undefined);
    return run;
  }

  private async swap(target: LoadWeightsRequest): Promise<SwapOutcome> {
    if (target.version <= this.versions.current) {
      return { status: 'ignored', reason: `version ${target.version} is not newer than the active ${this.versions.current}` };
    }
    const started = process.hrtime.bigint();
    this.swapping = true;
    this.gate.close(`loading policy version ${target.version}`);
    try {
      // Each running generation's own choice (its session's, through the gateway), else the deployment's policy.
      const fallback: WeightSwapChoice = this.options.policy === 'abort-and-resume' ? 'abort-and-resume' : 'finish';
      const n = this.active.interrupt((a) => (a.weightSwap ?? fallback) === 'abort-and-resume');
      if (n > 0) this.logger.info('weight swap: interrupted running generations', { version: target.version, interrupted: n });
      const drained = await this.active.whenIdle(this.options.drainTimeoutMs > 0 ? this.options.drainTimeoutMs : undefined);
      if (!drained) {
        const rest = this.active.interruptAll();
        this.logger.warn('weight swap: drain timed out; interrupting the rest', { version: target.version, interrupted: rest });
        await this.active.whenIdle();
      }
      const targets = this.replicas().filter((r) => r.healthy);
      const results = await Promise.allSettled(targets.map((r) => r.backend.loadWeights(target)));
      const loaded: string[] = [];
      const failed: string[] = [];
      results.forEach((res, i) => {
        const r = targets[i];
        if (res.status === 'fulfilled') {
          loaded.push(r.id);
        } else {
          failed.push(r.id);
          r.lastError = `weight load of version ${target.version} failed: ${(res.reason as Error).message}`;
          this.logger.error('replica failed to load weights', { replica: r.id, version: target.version, err: res.reason });
        }
      });
      if (loaded.length === 0) {
        throw new Error(
          `no replica loaded policy version ${target.version} from ${target.checkpointUri}${failed.length ? ` (failed: ${failed.join(', ')})` : ' (no healthy replica)'}`,
        );
      }
      const loadedSet = new Set(loaded);
      for (const r of this.replicas()) {
        r.stale = !loadedSet.has(r.id);
        if (!r.stale) r.weightsVersion = target.version;
      }
      this.versions.current = target.version;
      this.versions.checkpointUri = target.checkpointUri;
      this.versions.loaded = target;
      this.metrics.policyVersion.set(target.version);
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      this.metrics.swapSeconds.observe({ policy: this.options.policy }, seconds);
      this.logger.info('policy version activated', { version: target.version, policy: this.options.policy, loaded, failed, seconds });
      return { status: 'activated', loaded, failed, seconds };
    } finally {
      this.swapping = false;
      this.gate.open();
    }
  }

  /** Loads the active weights onto a replica that missed them (HealthMonitor's recovery hook). */
  resync(replica: Replica): Promise<void> {
    const run = this.chain.then(async () => {
      if (!replica.stale || this.versions.loaded === null) return;
      await replica.backend.loadWeights(this.versions.loaded);
      replica.weightsVersion = this.versions.current;
      replica.stale = false;
      this.logger.info('replica resynced to the active weights', { replica: replica.id, version: this.versions.current });
    });
    this.chain = run.catch(() => undefined);
    return run;
  }
}
