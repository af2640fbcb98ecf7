import type { DataSource, EntityManager } from 'typeorm';
import { LlmCall, PolicyVersion, Reward, Rollout, Trajectory } from '@anvil/persistence';

/** The reads the Data Pool, scheduler and trainer need; each accepts a transaction's manager. */
export class DataPoolStore {
  constructor(private readonly ds: DataSource) {}

  /** A rollout's calls in conversation order (turn, then arrival), token arrays decoded. */
  callsOfRollout(rolloutId: string, manager?: EntityManager): Promise<LlmCall[]> {
    return (manager ?? this.ds.manager).find(LlmCall, {
      where: { rolloutId },
      order: { turnIndex: 'ASC', receivedAt: 'ASC', id: 'ASC' },
    });
  }

  /** The G rollouts of a group by sample index. */
  rolloutsOfGroup(groupId: string, manager?: EntityManager): Promise<Rollout[]> {
    return (manager ?? this.ds.manager).find(Rollout, { where: { groupId }, order: { sampleIndex: 'ASC', id: 'ASC' } });
  }

  rewardsOfRollout(rolloutId: string, manager?: EntityManager): Promise<Reward[]> {
    return (manager ?? this.ds.manager).find(Reward, { where: { rolloutId }, order: { ordinal: 'ASC', eventId: 'ASC' } });
  }

  /** The highest published policy version, or null before the first publication. */
  latestPolicyVersion(manager?: EntityManager): Promise<PolicyVersion | null> {
    return (manager ?? this.ds.manager).findOne(PolicyVersion, { where: {}, order: { version: 'DESC' } });
  }

  /** Trajectories not in any train batch yet, oldest first (the scheduler's queue). */
  unscheduledTrajectories(options: { limit?: number } = {}, manager?: EntityManager): Promise<Trajectory[]> {
    return (manager ?? this.ds.manager).find(Trajectory, {
      where: { status: 'ready' },
      order: { readyAt: 'ASC', id: 'ASC' },
      take: options.limit,
    });
  }
}
