import { createLogger, ServiceMetrics } from '@anvil/observability';
import type { InferenceBackend } from '../backends/backend';
import { InferenceRuntime, type InferenceRuntimeOptions } from '../runtime';

/** A runtime over the given backends with test-friendly defaults (vitest-only helper). */
export function testRuntime(backends: InferenceBackend[], over: Partial<InferenceRuntimeOptions> = {}): InferenceRuntime {
  return new InferenceRuntime(
    backends,
    {
      deployment: 'test',
      swapPolicy: 'drain-then-swap',
      drainTimeoutMs: 0,
      maxInFlightPerReplica: 64,
      healthIntervalMs: 50,
      healthFailureThreshold: 2,
      healthRecoveryThreshold: 1,
      maxAttempts: 3,
      requestTimeoutMs: 60_000,
      initialVersion: 0,
      ...over,
    },
    new ServiceMetrics('inference-proxy-test'),
    createLogger({ service: 'inference-proxy-test', level: 'error', sink: () => undefined }),
  );
}
