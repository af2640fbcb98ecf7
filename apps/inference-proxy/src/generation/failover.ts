import type { Logger } from '@anvil/observability';
import type { InferenceMetrics } from '../metrics';
import type { HealthMonitor } from '../routing/health-monitor';
import type { Replica } from '../routing/replica';

export interface FailoverDeps {
  monitor: HealthMonitor;
  metrics: InferenceMetrics;
  logger: Logger;
}

/** The replicas one generation has failed on (the router skips them), and whether it may try another. */
export class Failover {
  readonly excluded = new Set<string>();
  private failures = 0;

  constructor(
    private readonly maxAttempts: number,
    private readonly d: FailoverDeps,
  ) {}

  /** Every replica allowed has failed the generation. */
  get exhausted(): boolean {
    return this.failures >= this.maxAttempts;
  }

  /** The replica failed the attempt (unreachable, stream broken): it is blamed in its health, and the generation moves on. */
  replicaFailed(replica: Replica, err: Error, requestId: string, produced: number): void {
    this.failures++;
    replica.failures++;
    this.excluded.add(replica.id);
    this.d.monitor.recordFailure(replica, err.message);
    const stage = stageOf(produced);
    this.d.metrics.failovers.inc({ stage });
    this.d.logger.warn('replica failed a generation; failing over', { requestId, replica: replica.id, stage, tokens: produced, err });
  }

  /** The engine aborted on its own (a restart, its own weight update): the generation resumes elsewhere, the replica unblamed. */
  engineAborted(replica: Replica, produced: number): void {
    this.failures++;
    this.excluded.add(replica.id);
    this.d.metrics.failovers.inc({ stage: stageOf(produced) });
  }
}

const stageOf = (produced: number) => (produced > 0 ? 'mid_stream' : 'before_first_token');
