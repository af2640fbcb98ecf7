import { MemoryGroup } from './memory-group';
import { PartitionedLog } from './partitioned-log';

export interface MemoryBrokerOptions {
  /**
   * Keep every record forever (true), or drop a record's bytes once every group that reads its
   * topic has committed past it (false, the default). Long embedded runs publish gigabytes of
   * token arrays; dropping consumed ones is the embedded stand-in for Kafka retention. A group
   * that subscribes later with fromBeginning then starts at the oldest retained record.
   * Topics no group reads (dead-letter topics, usually) are always kept.
   */
  retainConsumed?: boolean;
}

/**
 * The embedded "cluster": topics and consumer groups, shared by every MemoryBus client created
 * on it (one per service module in the embedded process, or several in tests, like several
 * processes against one Kafka).
 */
export class MemoryBroker {
  private readonly logs = new Map<string, PartitionedLog>();
  private readonly groups = new Map<string, MemoryGroup>();

  constructor(private readonly options: MemoryBrokerOptions = {}) {}

  /** Creates the topic on first use; an existing topic keeps its partition count (as on Kafka). */
  ensureTopic(topic: string, partitions: number): PartitionedLog {
    let log = this.logs.get(topic);
    if (!log) {
      log = new PartitionedLog(topic, partitions);
      this.logs.set(topic, log);
    }
    return log;
  }

  requireLog(topic: string): PartitionedLog {
    const log = this.logs.get(topic);
    if (!log) throw new Error(`topic ${topic} does not exist`);
    return log;
  }

  group(id: string): MemoryGroup {
    let group = this.groups.get(id);
    if (!group) {
      group = new MemoryGroup(id, this);
      this.groups.set(id, group);
    }
    return group;
  }

  get topicCount(): number {
    return this.logs.size;
  }

  /** After a commit: frees the records every group reading `topic` has committed past. */
  releaseConsumed(topic: string, partition: number): void {
    if (this.options.retainConsumed) return;
    let min = Infinity;
    for (const group of this.groups.values()) {
      if (!group.topics.has(topic)) continue;
      min = Math.min(min, group.committedOffset(topic, partition) ?? 0);
    }
    if (Number.isFinite(min)) this.requireLog(topic).release(partition, min);
  }
}
