import type { AnyEventEnvelope, PolicyVersionActivatedV1, RolloutGroupSettledV1, TrainBatchTrainedV1 } from '@anvil/contracts';
import type { Logger } from '@anvil/observability';
import type { Evaluations } from './evaluations/evaluations';
import type { Admission } from './rollouts/admission';
import type { GroupQueue } from './rollouts/group-queue';

export interface EventHandlerDeps {
  admission: Admission;
  queue: GroupQueue;
  evaluations: Evaluations;
  logger: Logger;
}

/**
 * What the manager does with the events it consumes. The bus hands over envelopes already
 * validated against the contracts' schemas (decodeEvent); switching on the type narrows each to
 * its payload. Other events on the same topics (trajectory.ready, train_batch.created,
 * evaluation.completed) are not the manager's business.
 */
export class RolloutEventHandlers {
  constructor(private readonly d: EventHandlerDeps) {}

  handle(e: AnyEventEnvelope): Promise<void> {
    switch (e.type) {
      case 'policy_version.activated':
        return this.versionActivated(e.payload);
      case 'rollout_group.settled':
        return this.groupSettled(e.payload);
      case 'train_batch.trained':
        return this.batchTrained(e.payload);
      case 'evaluation.requested':
        return this.d.evaluations.requested(e.payload);
      default:
        return Promise.resolve();
    }
  }

  private async versionActivated(p: PolicyVersionActivatedV1): Promise<void> {
    this.d.admission.activated(p.version);
  }

  /** The Data Pool settled a train group: dropped (its capacity released), or with environment failures to run again. */
  private async groupSettled(p: RolloutGroupSettledV1): Promise<void> {
    const { admission, queue } = this.d;
    const g = queue.trainGroup(p.groupId);
    if (!g) return;
    if (p.retryRolloutIds.length > 0 && g.row.status === 'finished') {
      // Released, then admitted again as a whole when the retries start.
      admission.release(g.row.id);
      if (await queue.requeue(g, p.retryRolloutIds)) {
        admission.pump();
        return;
      }
    }
    if (p.status === 'dropped') {
      admission.release(g.row.id);
      await queue.close(g, 'dropped');
      admission.pump();
    }
  }

  /** The trainer consumed a batch: its groups are trained (their capacity frees once the version it made serves). */
  private async batchTrained(p: TrainBatchTrainedV1): Promise<void> {
    const { admission, queue } = this.d;
    for (const id of p.groupIds) {
      const g = queue.trainGroup(id);
      if (!g) continue;
      try {
        // its slot frees when the version this batch produced serves, not before (staleness.ts)
        admission.trained(id, p.policyVersion);
      } catch (err) {
        // A group still in flight (retries running) cannot have been trained: keep it counted.
        this.d.logger.warn('train_batch.trained names a group still in flight', { groupId: id, err });
        continue;
      }
      await queue.close(g, 'trained');
    }
    admission.pump();
  }
}
