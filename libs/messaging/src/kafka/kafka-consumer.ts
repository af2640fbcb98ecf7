import type { Admin, Consumer, EachBatchPayload, Kafka, KafkaMessage } from 'kafkajs';
import type { PartitionLag, StopOptions, Subscription } from '../bus';
import {
  deliver,
  deliverBatch,
  dueAt,
  type DeliveryEnv,
  type InboundRecord,
  type OutboundRecord,
  type Processor,
} from '../delivery/deliver';
import { waitUntilIdle } from '../delivery/idle';
import type { DeliveryPolicy } from '../delivery/policy';
import { normalizeHeaders } from '../headers';
import { errorMessage, type BusLogger } from '../logger';
import type { SubscriptionTopology } from '../topic-names';
import type { ResolvedConsumerTuning } from './kafka-options';

export interface KafkaSubscriptionDeps<T> {
  kafka: Kafka;
  admin(): Promise<Admin>;
  topology: SubscriptionTopology;
  policy: DeliveryPolicy;
  processor: Processor<T>;
  tuning: ResolvedConsumerTuning;
  /** Per-partition fetch size: at least one maximum-size message. */
  maxBytesPerPartition: number;
  logger: BusLogger;
  forward(physicalTopic: string, record: OutboundRecord): Promise<void>;
  onStopped(): void;
}

const DEFAULT_STOP_TIMEOUT_MS = 30_000;

/**
 * One member of a Kafka consumer group. kafkajs runs `eachBatch` per partition; for each message
 * we run the shared delivery pipeline, then resolve its offset (autoCommit is off): an offset is
 * resolved, and later committed, only once the handler succeeded or the retry/DLQ copy was acked.
 */
export class KafkaSubscription<T> implements Subscription {
  readonly group: string;
  readonly topics: readonly string[];
  /** Set when kafkajs crashed the consumer for good (no restart); health() reports it. */
  failure?: Error;
  private consumer?: Consumer;
  /** Partitions this member holds, per physical topic (from the latest group join). */
  private assignment: Record<string, number[]> = {};
  /** fromBeginning=false: where each main-topic partition ended when subscribe() was called. */
  private startOffsets?: Map<string, string>;
  private joinedOnce = false;
  private lastCommit = 0;
  private readonly stopping = new AbortController();
  private readonly abandoning = new AbortController();
  private readonly resumeTimers = new Set<NodeJS.Timeout>();
  private stopped?: Promise<void>;

  constructor(private readonly deps: KafkaSubscriptionDeps<T>) {
    const { topology } = deps;
    this.group = topology.group;
    this.topics = [...new Set(topology.mainTopics.map((t) => topology.ns.logical(t)))];
  }

  /** Connects, subscribes and resolves once this member has joined the group. */
  async start(): Promise<void> {
    const { kafka, topology, policy, tuning, logger } = this.deps;
    const consumer = kafka.consumer({
      groupId: this.group,
      sessionTimeout: tuning.sessionTimeoutMs,
      rebalanceTimeout: tuning.rebalanceTimeoutMs,
      heartbeatInterval: tuning.heartbeatIntervalMs,
      maxWaitTimeInMs: tuning.maxWaitTimeMs,
      maxBytesPerPartition: this.deps.maxBytesPerPartition,
      maxBytes: Math.max(2 * this.deps.maxBytesPerPartition, 10 * 1024 * 1024),
      allowAutoTopicCreation: false,
    });
    this.consumer = consumer;
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      if (payload.restart) {
        logger.warn('kafka consumer crashed; kafkajs restarts it', { group: this.group, error: errorMessage(payload.error) });
      } else {
        this.failure = payload.error;
        logger.error('kafka consumer crashed and will not restart', { group: this.group, error: errorMessage(payload.error) });
      }
    });
    if (!policy.fromBeginning) {
      this.startOffsets = await this.endOffsets(topology.mainTopics).catch((err: unknown) => {
        logger.warn('could not read end offsets; uncommitted partitions start at the latest offset', {
          group: this.group,
          error: errorMessage(err),
        });
        return undefined;
      });
    }
    const joined = new Promise<void>((resolve) =>
      consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
        this.assignment = payload.memberAssignment;
        resolve();
        if (this.joinedOnce) void this.pinStartOffsets();
      }),
    );
    await consumer.connect();
    await consumer.subscribe({ topics: topology.mainTopics, fromBeginning: policy.fromBeginning });
    // Retry copies exist only for this group: always read them from the beginning.
    await consumer.subscribe({ topics: topology.retryTopics, fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: policy.concurrency,
      eachBatch: (payload) => this.eachBatch(payload),
    });
    // run() returns after the first join unless it crashed; then surface the crash, not a hang.
    if (this.failure) throw this.failure;
    await joined;
    this.joinedOnce = true;
    await this.pinStartOffsets();
  }

  stop(options: StopOptions = {}): Promise<void> {
    this.stopped ??= this.shutdown(options.timeoutMs ?? DEFAULT_STOP_TIMEOUT_MS);
    return this.stopped;
  }

  async lag(): Promise<PartitionLag[]> {
    const { topology } = this.deps;
    const admin = await this.deps.admin();
    const topics = [...topology.mainTopics, ...topology.retryTopics];
    const committed = await admin.fetchOffsets({ groupId: this.group, topics });
    const out: PartitionLag[] = [];
    for (const topic of topics) {
      const ends = await admin.fetchTopicOffsets(topic);
      const groupOffsets = committed.find((c) => c.topic === topic)?.partitions ?? [];
      for (const end of ends) {
        const low = Number(end.low);
        const c = Number(groupOffsets.find((p) => p.partition === end.partition)?.offset ?? -1);
        // -1: the group never committed here; count from the oldest retained message.
        const from = c >= 0 ? Math.max(c, low) : low;
        const high = Number(end.high);
        out.push({
          topic: topology.ns.logical(topic),
          partition: end.partition,
          committed: from,
          end: high,
          lag: Math.max(0, high - from),
        });
      }
    }
    return out;
  }

  whenIdle(options?: { timeoutMs?: number; pollMs?: number }): Promise<void> {
    return waitUntilIdle(() => this.lag(), { pollMs: 200, ...options });
  }

  /**
   * Kafka's own "latest" is resolved at the first fetch, after subscribe() has returned, and is
   * not committed until a message is handled: events published in between are silently
   * skipped, by this member or by the next one to own the partition. Like the in-process bus,
   * we pin partitions without a committed offset to where they ended when subscribe() was
   * called, and commit that position right away.
   */
  private async pinStartOffsets(): Promise<void> {
    const { startOffsets, consumer } = this;
    if (!startOffsets || !consumer || this.stopping.signal.aborted) return;
    const assignment = this.assignment;
    const topics = Object.keys(assignment).filter((t) => this.deps.topology.route(t).kind === 'main');
    if (topics.length === 0) return;
    try {
      const admin = await this.deps.admin();
      const committed = await admin.fetchOffsets({ groupId: this.group, topics });
      const pins: { topic: string; partition: number; offset: string }[] = [];
      for (const { topic, partitions } of committed) {
        for (const { partition, offset } of partitions) {
          const start = startOffsets.get(`${topic}:${partition}`);
          if (offset === '-1' && start !== undefined && assignment[topic]?.includes(partition))
            pins.push({ topic, partition, offset: start });
        }
      }
      if (pins.length === 0) return;
      for (const pin of pins) consumer.seek(pin);
      await consumer.commitOffsets(pins);
    } catch (err) {
      this.deps.logger.warn('could not pin start offsets; uncommitted partitions start at the latest offset', {
        group: this.group,
        error: errorMessage(err),
      });
    }
  }

  private async endOffsets(topics: readonly string[]): Promise<Map<string, string>> {
    const admin = await this.deps.admin();
    const out = new Map<string, string>();
    for (const topic of topics) for (const p of await admin.fetchTopicOffsets(topic)) out.set(`${topic}:${p.partition}`, p.high);
    return out;
  }

  private async shutdown(timeoutMs: number): Promise<void> {
    // Cuts backoff and retry-topic waits short; the batch loop starts no new message.
    this.stopping.abort();
    for (const timer of this.resumeTimers) clearTimeout(timer);
    this.resumeTimers.clear();
    // Past the deadline, in-flight handlers are abandoned: eachBatch returns without committing
    // them, and disconnect() (which waits for eachBatch) can leave the group.
    const deadline = setTimeout(() => this.abandoning.abort(), timeoutMs);
    try {
      await this.consumer?.disconnect();
    } catch (err) {
      this.deps.logger.warn('kafka consumer did not disconnect cleanly', { group: this.group, error: errorMessage(err) });
    } finally {
      clearTimeout(deadline);
      this.deps.onStopped();
    }
  }

  private async eachBatch(payload: EachBatchPayload): Promise<void> {
    const { batch, resolveOffset, heartbeat, commitOffsetsIfNecessary, uncommittedOffsets, isRunning, isStale, pause } = payload;
    const { topology, policy, processor, logger, tuning } = this.deps;
    const route = topology.route(batch.topic);
    const env: DeliveryEnv = {
      system: 'kafka',
      ns: topology.ns,
      group: this.group,
      policy,
      forward: this.deps.forward,
      signals: { stop: this.stopping.signal, abandon: this.abandoning.signal },
      keepAlive: { intervalMs: tuning.heartbeatIntervalMs, beat: heartbeat },
      logger,
    };
    // autoCommit is off: only offsets resolved below (handled, or forwarded to retry/DLQ) are
    // ever committed — within the batch every commitIntervalMs, and always when it ends.
    const commit = async () => {
      const pending = uncommittedOffsets();
      if (pending.topics.length > 0) await commitOffsetsIfNecessary(pending);
      this.lastCommit = Date.now();
    };
    try {
      if (processor.handleBatch && route.kind !== 'retry') {
        // Batch fast path (SubscribeOptions.batchHandler): runs of the fetched messages go to
        // the batch handler; offsets advance only over the prefix that is done.
        const size = processor.maxBatchSize ?? 256;
        const records = batch.messages.map((m) => toInbound(batch.topic, batch.partition, m));
        for (let i = 0; i < records.length;) {
          if (!isRunning() || isStale() || this.stopping.signal.aborted) return;
          const chunk = records.slice(i, i + size);
          const done = await deliverBatch(chunk, route, processor, env);
          if (done > 0) resolveOffset(chunk[done - 1].offset);
          if (done < chunk.length) return;
          i += done;
          if (Date.now() - this.lastCommit >= tuning.commitIntervalMs) await commit();
          await heartbeat();
        }
        return;
      }
      for (const message of batch.messages) {
        // Unresolved messages are fetched again by whoever owns the partition next.
        if (!isRunning() || isStale() || this.stopping.signal.aborted) return;
        const record = toInbound(batch.topic, batch.partition, message);
        const due = dueAt(record, route);
        if (due > Date.now()) {
          this.pauseUntil(pause, due);
          return;
        }
        const outcome = await deliver(record, route, processor, env);
        if (outcome === 'interrupted') return;
        resolveOffset(message.offset);
        if (Date.now() - this.lastCommit >= tuning.commitIntervalMs) await commit();
        await heartbeat();
      }
    } finally {
      // Also on the way out of a rebalance (heartbeat threw) or a stop: hand over what is done.
      await commit();
    }
  }

  /**
   * A retry copy that is not due yet: pause just this partition and resume it later, instead of
   * sleeping inside eachBatch, which would hold up every other partition at concurrency 1.
   */
  private pauseUntil(pause: () => () => void, due: number): void {
    const resume = pause();
    const timer = setTimeout(() => {
      this.resumeTimers.delete(timer);
      if (!this.stopping.signal.aborted) resume();
    }, due - Date.now());
    this.resumeTimers.add(timer);
  }
}

function toInbound(topic: string, partition: number, message: KafkaMessage): InboundRecord {
  return {
    topic,
    partition,
    offset: message.offset,
    key: message.key ? message.key.toString('utf8') : null,
    value: message.value,
    headers: normalizeHeaders(message.headers),
  };
}
