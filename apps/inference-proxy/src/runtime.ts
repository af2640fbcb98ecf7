import type { Logger, ServiceMetrics } from '@anvil/observability';
import type { InferenceBackend } from './backends/backend';
import { ActiveAttempts } from './generation/active-attempts';
import { GenerationService } from './generation/generation-service';
import { InferenceMetrics } from './metrics';
import { HealthMonitor } from './routing/health-monitor';
import { Replica } from './routing/replica';
import { Router } from './routing/router';
import { AdmissionGate } from './weights/admission-gate';
import { PolicyVersionState } from './weights/policy-version';
import { WeightSwapper, type WeightSwapPolicy } from './weights/weight-swapper';

export interface InferenceRuntimeOptions {
  deployment: string;
  swapPolicy: WeightSwapPolicy;
  drainTimeoutMs: number;
  maxInFlightPerReplica: number;
  healthIntervalMs: number;
  healthFailureThreshold: number;
  healthRecoveryThreshold: number;
  /** Replicas one request may fail on before it gives up. */
  maxAttempts: number;
  requestTimeoutMs: number;
  /** Policy version of the weights the replicas start with. */
  initialVersion: number;
}

/**
 * The proxy's moving parts wired together, free of Nest so tests and an embedded host build the
 * very same thing: replicas + router + health monitor, the policy version with its admission
 * gate and swapper, and the generation service on top.
 */
export class InferenceRuntime {
  readonly replicas: Replica[];
  readonly metrics: InferenceMetrics;
  readonly versions: PolicyVersionState;
  readonly gate = new AdmissionGate();
  readonly active = new ActiveAttempts();
  readonly router: Router;
  readonly monitor: HealthMonitor;
  readonly swapper: WeightSwapper;
  readonly generation: GenerationService;

  constructor(
    backends: InferenceBackend[],
    readonly options: InferenceRuntimeOptions,
    serviceMetrics: ServiceMetrics,
    private readonly logger: Logger,
  ) {
    this.replicas = backends.map((b) => new Replica(b));
    this.metrics = new InferenceMetrics(serviceMetrics);
    this.versions = new PolicyVersionState(options.initialVersion);
    this.metrics.policyVersion.set(options.initialVersion);
    const list = () => this.replicas;
    this.router = new Router(list, { maxInFlightPerReplica: options.maxInFlightPerReplica });
    this.swapper = new WeightSwapper(
      list,
      this.versions,
      this.gate,
      this.active,
      { policy: options.swapPolicy, drainTimeoutMs: options.drainTimeoutMs },
      this.metrics,
      logger,
    );
    this.monitor = new HealthMonitor(
      list,
      {
        intervalMs: options.healthIntervalMs,
        failureThreshold: options.healthFailureThreshold,
        recoveryThreshold: options.healthRecoveryThreshold,
      },
      logger,
      (r) => this.swapper.resync(r),
      (r) => this.metrics.replicaHealthy.set({ replica: r.id }, r.healthy ? 1 : 0),
    );
    for (const r of this.replicas) this.metrics.replicaHealthy.set({ replica: r.id }, 1);
    this.generation = new GenerationService(this.router, this.monitor, this.versions, this.gate, this.active, this.metrics, logger, {
      maxAttempts: options.maxAttempts,
      requestTimeoutMs: options.requestTimeoutMs,
    });
  }

  start(): void {
    this.monitor.start();
  }

  /** Graceful stop: running generations get `graceMs` to finish, then are handed back (aborted with their tokens). */
  async stop(graceMs: number): Promise<void> {
    this.monitor.stop();
    await this.generation.shutdown(graceMs);
    await Promise.all(
      this.replicas.map((r) =>
        r.backend.close?.().catch((err: unknown) => this.logger.warn('backend close failed', { replica: r.id, err })),
      ),
    );
  }

  /** What GET /internal/v1/replicas reports. */
  snapshot() {
    return {
      deployment: this.options.deployment,
      policyVersion: this.versions.current,
      checkpointUri: this.versions.checkpointUri,
      swapPolicy: this.options.swapPolicy,
      swapping: this.swapper.inProgress,
      waitingForSwap: this.gate.waiting,
      replicas: this.replicas.map((r) => r.snapshot()),
    };
  }
}
