import type { MemoryBroker } from './memory-broker';

export interface TopicPartition {
  topic: string;
  partition: number;
}

/** What the group coordinator needs from a member (a MemorySubscription). */
export interface GroupMember {
  /** Physical topics the member reads. */
  readonly physicalTopics: readonly string[];
  /** Replaces the member's partitions; it revokes the ones it lost and starts the new ones. */
  assign(partitions: TopicPartition[]): void;
}

const tpKey = (topic: string, partition: number) => `${topic}\u0000${partition}`;

/**
 * Consumer-group state of the embedded bus: committed offsets per partition, members, and the
 * assignment of partitions to members. Mirrors a Kafka group coordinator: every join or leave
 * rebalances, a partition has at most one active reader, and the next reader starts from the
 * committed offset only after the previous one has finished its in-flight message.
 */
export class MemoryGroup {
  private readonly committed = new Map<string, number>();
  private readonly owners = new Map<string, Promise<void>>();
  private members: GroupMember[] = [];
  /** Topics this group has ever read: its committed offsets hold back retention there. */
  readonly topics = new Set<string>();

  constructor(
    readonly id: string,
    private readonly broker: MemoryBroker,
  ) {}

  /**
   * Adds a member. Partitions the group has never committed start at the oldest retained record
   * (`fromBeginning(topic)`) or at the current end, recorded right away so that nothing
   * published after subscribe() resolves is skipped.
   */
  join(member: GroupMember, fromBeginning: (topic: string) => boolean): void {
    for (const topic of member.physicalTopics) {
      this.topics.add(topic);
      const log = this.broker.requireLog(topic);
      for (let p = 0; p < log.partitionCount; p++) {
        if (!this.committed.has(tpKey(topic, p))) {
          this.committed.set(tpKey(topic, p), fromBeginning(topic) ? log.startOffset(p) : log.endOffset(p));
        }
      }
    }
    this.members.push(member);
    this.rebalance();
  }

  leave(member: GroupMember): void {
    const before = this.members.length;
    this.members = this.members.filter((m) => m !== member);
    if (this.members.length !== before) this.rebalance();
  }

  committedOffset(topic: string, partition: number): number | undefined {
    return this.committed.get(tpKey(topic, partition));
  }

  commit(topic: string, partition: number, offset: number): void {
    const key = tpKey(topic, partition);
    if ((this.committed.get(key) ?? -1) >= offset) return;
    this.committed.set(key, offset);
    this.broker.releaseConsumed(topic, partition);
  }

  /**
   * Registers the worker that now owns a partition and returns the previous owner's completion:
   * the new worker must wait for it before reading the committed offset.
   */
  takeOwnership(topic: string, partition: number, start: (previousOwner: Promise<void>) => Promise<void>): void {
    const key = tpKey(topic, partition);
    const previous = this.owners.get(key) ?? Promise.resolve();
    this.owners.set(key, start(previous));
  }

  /** Round-robin per topic over the members subscribed to it, rotating the start member per topic. */
  private rebalance(): void {
    const assignment: TopicPartition[][] = this.members.map(() => []);
    const topics = [...new Set(this.members.flatMap((m) => m.physicalTopics))].sort();
    let rotation = 0;
    for (const topic of topics) {
      const candidates = this.members.flatMap((m, i) => (m.physicalTopics.includes(topic) ? [i] : []));
      const count = this.broker.requireLog(topic).partitionCount;
      for (let p = 0; p < count; p++) assignment[candidates[(p + rotation) % candidates.length]].push({ topic, partition: p });
      rotation++;
    }
    this.members.forEach((member, i) => member.assign(assignment[i]));
  }
}
