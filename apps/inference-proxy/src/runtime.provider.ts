import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { Logger, ServiceMetrics } from '@anvil/observability';
import { LOGGER, METRICS, ReadinessRegistry } from '@anvil/service-kit';
import { createBackends } from './backends/create-backends';
import type { InferenceProxyConfig } from './config';
import { InferenceRuntime } from './runtime';
import { INFERENCE_CONFIG, INFERENCE_RUNTIME } from './tokens';

/** The runtime, or the reason this process has none (kept serving ops endpoints and answering 503). */
export interface RuntimeHandle {
  runtime: InferenceRuntime | null;
  unavailable: string | null;
}

export const runtimeProvider = {
  provide: INFERENCE_RUNTIME,
  inject: [INFERENCE_CONFIG, METRICS, LOGGER],
  useFactory: async (config: InferenceProxyConfig, metrics: ServiceMetrics, logger: Logger): Promise<RuntimeHandle> => {
    try {
      const backends = await createBackends(config);
      const runtime = new InferenceRuntime(
        backends,
        {
          deployment: config.DEPLOYMENT_NAME,
          swapPolicy: config.WEIGHT_SWAP_POLICY,
          drainTimeoutMs: config.WEIGHT_DRAIN_TIMEOUT_MS,
          maxInFlightPerReplica: config.MAX_IN_FLIGHT_PER_REPLICA,
          healthIntervalMs: config.HEALTH_INTERVAL_MS,
          healthFailureThreshold: config.HEALTH_FAILURE_THRESHOLD,
          healthRecoveryThreshold: config.HEALTH_RECOVERY_THRESHOLD,
          maxAttempts: config.MAX_ATTEMPTS_PER_REQUEST,
          requestTimeoutMs: config.REQUEST_TIMEOUT_MS,
          initialVersion: config.INITIAL_POLICY_VERSION,
        },
        metrics,
        logger.child({ component: 'inference' }),
      );
      logger.info('inference backends ready', {
        backend: config.INFERENCE_BACKEND,
        replicas: runtime.replicas.map((r) => ({ id: r.id, model: r.backend.model, vocabSize: r.backend.vocabSize })),
        swapPolicy: config.WEIGHT_SWAP_POLICY,
      });
      return { runtime, unavailable: null };
    } catch (err) {
      // A backend that cannot start (the native addon missing, a checkpoint unreadable): keep the service up (ops
      // endpoints, honest errors) rather than crash-looping; every generate answers 503 with why.
      logger.error('no inference backend: generations will be refused', { backend: config.INFERENCE_BACKEND, err });
      return { runtime: null, unavailable: (err as Error).message };
    }
  },
};

/**
 * Starts health checks and registers the replicas' readiness; on shutdown lets running
 * generations finish (up to most of SHUTDOWN_TIMEOUT_MS) and hands back the rest aborted with
 * their tokens, before the HTTP server closes.
 */
@Injectable()
export class RuntimeLifecycle implements OnModuleInit, OnModuleDestroy {
  constructor(
    @Inject(INFERENCE_RUNTIME) private readonly handle: RuntimeHandle,
    @Inject(INFERENCE_CONFIG) private readonly config: InferenceProxyConfig,
    @Inject(ReadinessRegistry) private readonly readiness: ReadinessRegistry,
  ) {}

  onModuleInit(): void {
    const runtime = this.handle.runtime;
    if (!runtime) return;
    runtime.start();
    void runtime.monitor.checkAll();
    this.readiness.add({
      name: 'inference-replicas',
      check: async () => {
        const routable = runtime.replicas.filter((r) => r.routable).length;
        if (routable === 0) throw new Error(`no routable replica of ${runtime.replicas.length}`);
        return routable;
      },
    });
  }

  async onModuleDestroy(): Promise<void> {
    await this.handle.runtime?.stop(Math.max(0, this.config.SHUTDOWN_TIMEOUT_MS - 5_000));
  }
}
