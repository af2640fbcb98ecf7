import type { Admin } from 'kafkajs';
import type { BusLogger } from '../logger';

/**
 * Creates topics before anything produces to or subscribes to them. Auto-creation would race
 * (a consumer can join before the topic exists and miss its first assignment) and would use
 * the broker's defaults instead of ours. Known topics are cached; concurrent callers share one
 * creation per topic.
 */
export class TopicAdmin {
  private readonly known = new Set<string>();
  private readonly pending = new Map<string, Promise<void>>();

  constructor(
    private readonly admin: () => Promise<Admin>,
    private readonly settings: { partitions: number; replicationFactor: number; maxMessageBytes: number },
    private readonly logger: BusLogger,
  ) {}

  async ensure(topics: readonly string[]): Promise<void> {
    const wanted = [...new Set(topics)].filter((t) => !this.known.has(t));
    if (wanted.length === 0) return;
    const others: Promise<void>[] = [];
    const mine: string[] = [];
    for (const t of wanted) {
      const creating = this.pending.get(t);
      if (creating) others.push(creating);
      else mine.push(t);
    }
    if (mine.length > 0) {
      const creation = this.create(mine);
      for (const t of mine) this.pending.set(t, creation);
      try {
        await creation;
        for (const t of mine) this.known.add(t);
      } finally {
        for (const t of mine) this.pending.delete(t);
      }
    }
    await Promise.all(others);
  }

  private async create(topics: string[]): Promise<void> {
    const admin = await this.admin();
    const existing = new Set(await admin.listTopics());
    const missing = topics.filter((t) => !existing.has(t));
    if (missing.length === 0) return;
    // Resolves false (not an error) when another process created them first. kafkajs' own
    // waitForLeaders gives up on the UNKNOWN_TOPIC_OR_PARTITION a KRaft broker answers for a
    // moment after creation, so we wait for leaders ourselves.
    await admin.createTopics({
      waitForLeaders: false,
      topics: missing.map((topic) => ({
        topic,
        numPartitions: this.settings.partitions,
        replicationFactor: this.settings.replicationFactor,
        configEntries: [{ name: 'max.message.bytes', value: String(this.settings.maxMessageBytes) }],
      })),
    });
    await this.waitForLeaders(admin, missing);
    this.logger.info('created topics', { topics: missing, partitions: this.settings.partitions });
  }

  private async waitForLeaders(admin: Admin, topics: string[]): Promise<void> {
    const deadline = Date.now() + LEADER_WAIT_MS;
    for (let attempt = 0; ; attempt++) {
      try {
        const { topics: metadata } = await admin.fetchTopicMetadata({ topics });
        const led =
          metadata.length === topics.length && metadata.every((t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0));
        // A leader in the metadata may still answer NOT_LEADER for a moment; ListOffsets
        // succeeding means produce, fetch and offset lookups will too.
        if (led) {
          for (const topic of topics) await admin.fetchTopicOffsets(topic);
          return;
        }
      } catch (err) {
        if (Date.now() > deadline) throw err;
      }
      if (Date.now() > deadline) throw new Error(`topics ${topics.join(', ')} have no leader after ${LEADER_WAIT_MS} ms`);
      await new Promise((resolve) => setTimeout(resolve, Math.min(50 * 2 ** attempt, 500)));
    }
  }
}

const LEADER_WAIT_MS = 30_000;
