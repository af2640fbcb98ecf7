import type { Logger } from '@anvil/observability';
import type { Replica } from './replica';

export interface HealthMonitorOptions {
  intervalMs: number;
  /** Consecutive failures (checks or generations) that take a replica out of rotation. */
  failureThreshold: number;
  /** Consecutive successful checks that bring it back. */
  recoveryThreshold: number;
}

/**
 * Active health checks (each replica's health endpoint every intervalMs) plus passive ones
 * (a generation that could not reach the replica counts as a failed check). A replica that
 * comes back while holding other weights than the active version is reloaded first
 * (`onRecovered`), so it never serves tokens under a version it does not have.
 */
export class HealthMonitor {
  private timer: NodeJS.Timeout | null = null;
  private checking = false;

  constructor(
    private readonly replicas: () => readonly Replica[],
    private readonly options: HealthMonitorOptions,
    private readonly logger: Logger,
    /** Brings a replica that is back (or healthy but stale) up to the active weights. */
    private readonly onRecovered: (replica: Replica) => Promise<void> = async () => undefined,
    private readonly onChange: (replica: Replica) => void = () => undefined,
  ) {}

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.checkAll(), this.options.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  async checkAll(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    try {
      await Promise.all(this.replicas().map((r) => this.check(r)));
    } finally {
      this.checking = false;
    }
  }

  private async check(replica: Replica): Promise<void> {
    const result = await replica.backend.health().catch((err: unknown) => ({ ok: false, detail: (err as Error).message }));
    replica.lastCheckAt = Date.now();
    if (result.ok) await this.recordSuccess(replica);
    else this.recordFailure(replica, result.detail ?? 'health check failed');
  }

  private async recordSuccess(replica: Replica): Promise<void> {
    replica.consecutiveFailures = 0;
    replica.consecutiveSuccesses++;
    if (replica.healthy && !replica.stale) return;
    if (!replica.healthy && replica.consecutiveSuccesses < this.options.recoveryThreshold) return;
    try {
      await this.onRecovered(replica);
      if (replica.healthy) return;
      replica.healthy = true;
      replica.lastError = null;
      this.logger.info('replica recovered', { replica: replica.id });
      this.onChange(replica);
    } catch (err) {
      this.recordFailure(replica, `recovery failed: ${(err as Error).message}`);
    }
  }

  /** Also called by the generation path when a replica could not be reached. */
  recordFailure(replica: Replica, error: string): void {
    replica.consecutiveSuccesses = 0;
    replica.consecutiveFailures++;
    replica.lastError = error;
    if (replica.healthy && replica.consecutiveFailures >= this.options.failureThreshold) {
      replica.healthy = false;
      this.logger.warn('replica out of rotation', { replica: replica.id, error, failures: replica.consecutiveFailures });
      this.onChange(replica);
    }
  }
}
