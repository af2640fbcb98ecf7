import type { Logger } from '@anvil/observability';
import type { EventBatcher } from '../event-batcher';
import type { RolloutMetrics } from '../metrics';
import type { RolloutStateStore } from '../state-store';
import { startedEvent } from './events';
import type { RolloutContext } from './rollout-context';

export interface RolloutStartDeps {
  events: EventBatcher;
  state: RolloutStateStore;
  metrics: RolloutMetrics;
  logger: Logger;
  producer: string;
}

/**
 * A rollout's rollout.started and its running-state write. Both travel beside the agent (the
 * session id is already durable, so neither is needed to recover it); rollout.started goes out
 * once, at the first attempt that has a session, and is made durable before rollout.completed.
 */
export class RolloutStart {
  /** rollout.started on its way (true once durable, false when its publish failed); null while no attempt got that far. */
  private sent: Promise<boolean> | null = null;
  private runningWrite: Promise<void> = Promise.resolve();

  constructor(
    private readonly d: RolloutStartDeps,
    private readonly ctx: RolloutContext,
  ) {}

  /** Whether an attempt got its session and started. */
  get happened(): boolean {
    return this.sent !== null;
  }

  /** The latest running-state write (the completed write goes after it). */
  get lastWrite(): Promise<void> {
    return this.runningWrite;
  }

  /** Attempt `attemptNo` (1-based) has its session: the rollout is running, and rollout.started goes out unless it has. */
  attempt(sessionId: string, attemptNo: number): void {
    const { rollout, versionAtStart } = this.ctx;
    this.runningWrite = this.d.state
      .rolloutRunning(rollout.id, sessionId, versionAtStart, attemptNo)
      .catch((err: unknown) => this.d.logger.warn('rollout state write failed', { rolloutId: rollout.id, err }));
    if (this.sent) return;
    this.sent = this.d.events.publishDurably(this.event()).then(
      () => true,
      () => false,
    );
    this.countStarted();
  }

  /** rollout.started durable: the one sent, or one sent now when that failed or no attempt started (so every rollout of the group is reported). */
  async durable(): Promise<void> {
    if (this.sent && (await this.sent)) return;
    if (!this.sent) this.countStarted();
    await this.d.events.publishDurably(this.event());
  }

  private event() {
    const { spec, group, rollout, versionAtStart } = this.ctx;
    return startedEvent({ producer: this.d.producer, spec, group: group.row, rollout, versionAtStart });
  }

  private countStarted(): void {
    this.d.metrics.started.inc({ purpose: this.ctx.purpose, agent: this.ctx.spec.agent.kind });
  }
}
