import type { Logger } from '@anvil/observability';
import { StalenessController, type StalenessSnapshot } from '@anvil/rl';
import type { RolloutMetrics } from '../metrics';
import type { RolloutRuntimeConfig } from '../runtime-options';
import type { RolloutRow } from '../state-store';
import { AdmissionWait, type AdmissionBlock } from './admission-wait';
import type { GroupQueue } from './group-queue';
import type { GroupState } from './group-state';
import type { Recovered } from './recovery';

export interface AdmissionDeps {
  config: Pick<RolloutRuntimeConfig, 'concurrency' | 'eta' | 'groupsPerStep' | 'initialPolicyVersion' | 'admissionPollMs'>;
  queue: GroupQueue;
  slots: { readonly size: number; launch(g: GroupState, r: RolloutRow): void };
  metrics: RolloutMetrics;
  logger: Logger;
  /** Whether an evaluation runs: training admissions wait meanwhile. */
  evaluating(): boolean;
  /** After each round of admissions (what follows the lines: sessions opened ahead, idle waiters). */
  pumped(): void;
}

/**
 * Admission: the current policy version and the staleness controller (libs/rl) that admits train
 * groups in submission order, eval groups first at their pinned version, and the admitted
 * rollouts into the N slots. `pump` runs whenever something may have changed (an event, a slot
 * freed, a submission) and on a timer for refusals nothing else wakes.
 */
export class Admission {
  private controller: StalenessController;
  private version: number;
  private readonly wait: AdmissionWait;
  /** closed until the runtime starts; stopped for good. */
  private phase: 'closed' | 'open' | 'stopped' = 'closed';
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly d: AdmissionDeps) {
    this.controller = new StalenessController({ eta: d.config.eta, groupsPerStep: d.config.groupsPerStep });
    this.version = d.config.initialPolicyVersion;
    this.wait = new AdmissionWait(d.metrics);
  }

  get policyVersion(): number {
    return this.version;
  }

  /** Admissions may run from now (the runtime's start, before recovery: what is submitted meanwhile waits in line). */
  open(): void {
    if (this.phase === 'closed') this.phase = 'open';
  }

  /** Retries refused admissions every admissionPollMs, and admits what waits now. */
  poll(): void {
    if (this.phase !== 'open') return;
    this.timer = setInterval(() => this.pump(), this.d.config.admissionPollMs);
    this.timer.unref();
    this.pump();
  }

  /** Admits nothing more, ever. */
  stop(): void {
    this.phase = 'stopped';
    if (this.timer) clearInterval(this.timer);
  }

  /** The staleness counters rebuilt from durable state. */
  restore(rec: Recovered): void {
    this.controller = StalenessController.restore(
      { eta: this.d.config.eta, groupsPerStep: this.d.config.groupsPerStep },
      { inFlight: rec.inFlight, untrained: rec.untrained },
    );
  }

  /** A newer policy version serves: the version bound moves. */
  activated(version: number): void {
    if (version <= this.version) return;
    this.version = version;
    this.controller.activated(version);
    this.pump();
  }

  /** A member's outcome is out; a train group it finished now counts as finished but untrained. */
  rolloutDone(g: GroupState, r: RolloutRow): boolean {
    const groupDone = this.d.queue.rolloutDone(g, r);
    if (groupDone && g.row.purpose === 'train') this.controller.finished(g.row.id);
    return groupDone;
  }

  /** A group dropped, or released to be admitted again with its retries: its capacity is free. */
  release(groupId: string): void {
    this.controller.dropped(groupId);
  }

  /** Trained by a batch that made `releaseAtVersion`: its slot frees when that version serves. Throws for a group still in flight. */
  trained(groupId: string, releaseAtVersion: number): void {
    this.controller.trained(groupId, { releaseAtVersion, currentVersion: this.version });
  }

  staleness(): StalenessSnapshot {
    return this.controller.snapshot();
  }

  /** Seconds the head of the train queue has waited so far, by what held it (the open wait included). */
  blockedSeconds(now = Date.now()): Record<AdmissionBlock, number> {
    return this.wait.seconds(now);
  }

  pump(): void {
    if (this.phase !== 'open') return;
    this.admitWhileRoom();
    this.d.pumped();
  }

  private admitWhileRoom(): void {
    const { queue, slots, config, metrics } = this.d;
    for (;;) {
      while (slots.size < config.concurrency) {
        const next = queue.ready.shift();
        if (!next) break;
        slots.launch(next.group, next.rollout);
      }
      if (slots.size + queue.ready.length >= config.concurrency) {
        this.wait.mark(queue.train.length > 0 && queue.evals.length === 0 && !this.d.evaluating() ? 'slots' : null);
        return;
      }
      // Eval groups first, and only at their pinned version.
      const ev = queue.evals.shift();
      if (ev) {
        if (this.version !== ev.evalVersion) {
          // The version moved before these were admitted: run them anyway (results say versionDrift); nothing waits forever.
          this.d.logger.warn('evaluation admitted after the version moved', {
            evalId: ev.row.evalId,
            pinned: ev.evalVersion,
            current: this.version,
          });
        }
        queue.admit(ev, this.version);
        continue;
      }
      const head = this.d.evaluating() ? undefined : queue.train[0];
      if (!head) {
        this.wait.mark(null);
        return;
      }
      const r = this.controller.tryAdmit(head.row.id, this.version);
      if (!r.admitted) {
        metrics.admissionRefusals.inc({ reason: r.reason });
        this.wait.mark(r.reason);
        return;
      }
      this.wait.mark(null);
      queue.train.shift();
      metrics.admissionWaitSeconds.observe((Date.now() - head.submittedAt) / 1000);
      queue.admit(head, this.version);
    }
  }
}
