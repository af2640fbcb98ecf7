import type { InferenceBackend } from '../backends/backend';

/**
 * What the proxy knows about one replica: its backend, health as seen by the checks and by
 * failed generations, which weights it holds, and counters for GET /internal/v1/replicas.
 */
export class Replica {
  healthy = true;
  consecutiveFailures = 0;
  consecutiveSuccesses = 0;
  lastError: string | null = null;
  lastCheckAt: number | null = null;
  /** Policy version of the weights loaded on it; null = never loaded by us (the initial weights). */
  weightsVersion: number | null = null;
  /** True while it holds other weights than the active version (a failed or missed load). */
  stale = false;
  requests = 0;
  failures = 0;
  tokensGenerated = 0;
  promptTokens = 0;
  cachedPromptTokens = 0;

  constructor(readonly backend: InferenceBackend) {}

  get id(): string {
    return this.backend.id;
  }

  get inFlight(): number {
    return this.backend.inFlight;
  }

  /** May take new generations. */
  get routable(): boolean {
    return this.healthy && !this.stale;
  }

  snapshot() {
    return {
      id: this.id,
      kind: this.backend.kind,
      model: this.backend.model,
      vocabSize: this.backend.vocabSize,
      healthy: this.healthy,
      routable: this.routable,
      stale: this.stale,
      weightsVersion: this.weightsVersion,
      inFlight: this.inFlight,
      consecutiveFailures: this.consecutiveFailures,
      lastError: this.lastError,
      lastCheckAt: this.lastCheckAt,
      requests: this.requests,
      failures: this.failures,
      tokensGenerated: this.tokensGenerated,
      promptTokens: this.promptTokens,
      cachedPromptTokens: this.cachedPromptTokens,
      prefixCacheHitRate: this.promptTokens ? this.cachedPromptTokens / this.promptTokens : 0,
    };
  }
}
export type ReplicaSnapshot = ReturnType<Replica['snapshot']>;
