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
import { sleep } from '../delivery/signals';
import { normalizeHeaders } from '../headers';
import { errorMessage, type BusLogger } from '../logger';
import type { SubscriptionTopology } from '../topic-names';
import type { MemoryBroker } from './memory-broker';
import type { GroupMember, MemoryGroup, TopicPartition } from './memory-group';
import type { StoredRecord } from './partitioned-log';
import { Semaphore } from './semaphore';

export interface MemorySubscriptionDeps<T> {
  broker: MemoryBroker;
  topology: SubscriptionTopology;
  policy: DeliveryPolicy;
  processor: Processor<T>;
  logger: BusLogger;
  forward(physicalTopic: string, record: OutboundRecord): Promise<void>;
  onStopped(): void;
}

interface Worker {
  revoke: AbortController;
}

const DEFAULT_STOP_TIMEOUT_MS = 30_000;

/**
 * One member of a consumer group on the embedded bus. Each assigned partition gets a worker
 * loop: read at the committed offset, deliver, commit, repeat. Like Kafka, a partition is read
 * by one member at a time and one message at a time, which is what keeps per-key order.
 */
export class MemorySubscription<T> implements Subscription, GroupMember {
  readonly group: string;
  readonly topics: readonly string[];
  readonly physicalTopics: readonly string[];
  private readonly coordinator: MemoryGroup;
  private readonly workers = new Map<string, Worker>();
  /** Every worker loop still running, revoked ones included: stop() waits for all of them. */
  private readonly running = new Set<Promise<void>>();
  private readonly stopping = new AbortController();
  private readonly abandoning = new AbortController();
  private readonly permits: Semaphore;
  private stopped?: Promise<void>;

  constructor(private readonly deps: MemorySubscriptionDeps<T>) {
    const { topology } = deps;
    this.group = topology.group;
    this.topics = [...new Set(topology.mainTopics.map((t) => topology.ns.logical(t)))];
    this.physicalTopics = [...topology.mainTopics, ...topology.retryTopics];
    this.coordinator = deps.broker.group(topology.group);
    this.permits = new Semaphore(deps.policy.concurrency);
  }

  start(): void {
    // Retry copies exist only for this group: always read them from the beginning.
    this.coordinator.join(this, (topic) => this.deps.topology.route(topic).kind === 'retry' || this.deps.policy.fromBeginning);
  }

  assign(partitions: TopicPartition[]): void {
    if (this.stopping.signal.aborted) return; // leaving: the group reassigns once we are gone
    const next = new Set(partitions.map(({ topic, partition }) => `${topic}\u0000${partition}`));
    for (const [key, worker] of this.workers) {
      if (!next.has(key)) {
        worker.revoke.abort();
        this.workers.delete(key);
      }
    }
    for (const tp of partitions) {
      const key = `${tp.topic}\u0000${tp.partition}`;
      if (this.workers.has(key)) continue;
      const worker: Worker = { revoke: new AbortController() };
      this.workers.set(key, worker);
      this.coordinator.takeOwnership(tp.topic, tp.partition, (previousOwner) => {
        const done = this.runPartition(tp, previousOwner, worker.revoke.signal);
        this.running.add(done);
        void done.finally(() => this.running.delete(done));
        return done;
      });
    }
  }

  stop(options: StopOptions = {}): Promise<void> {
    this.stopped ??= this.shutdown(options.timeoutMs ?? DEFAULT_STOP_TIMEOUT_MS);
    return this.stopped;
  }

  async lag(): Promise<PartitionLag[]> {
    const { broker, topology } = this.deps;
    const out: PartitionLag[] = [];
    for (const topic of this.physicalTopics) {
      const log = broker.requireLog(topic);
      for (let partition = 0; partition < log.partitionCount; partition++) {
        const start = log.startOffset(partition);
        const committed = Math.max(this.coordinator.committedOffset(topic, partition) ?? start, start);
        const end = log.endOffset(partition);
        out.push({ topic: topology.ns.logical(topic), partition, committed, end, lag: Math.max(0, end - committed) });
      }
    }
    return out;
  }

  whenIdle(options?: { timeoutMs?: number; pollMs?: number }): Promise<void> {
    return waitUntilIdle(() => this.lag(), { pollMs: 10, ...options });
  }

  private async shutdown(timeoutMs: number): Promise<void> {
    this.stopping.abort();
    const deadline = setTimeout(() => this.abandoning.abort(), timeoutMs);
    try {
      await Promise.all([...this.running]);
    } finally {
      clearTimeout(deadline);
    }
    this.workers.clear();
    this.coordinator.leave(this);
    this.deps.onStopped();
  }

  private async runPartition({ topic, partition }: TopicPartition, previousOwner: Promise<void>, revoked: AbortSignal): Promise<void> {
    const { broker, topology, policy, processor, logger } = this.deps;
    await previousOwner;
    const stop = AbortSignal.any([revoked, this.stopping.signal]);
    const log = broker.requireLog(topic);
    const route = topology.route(topic);
    const env: DeliveryEnv = {
      system: 'anvil-memory',
      ns: topology.ns,
      group: this.group,
      policy,
      forward: this.deps.forward,
      signals: { stop, abandon: this.abandoning.signal },
      logger,
    };
    while (!stop.aborted) {
      const position = this.coordinator.committedOffset(topic, partition) ?? log.startOffset(partition);
      const entry = log.read(partition, position);
      if (!entry) {
        await log.waitBeyond(partition, position, stop);
        continue;
      }
      const record = toInbound(topic, partition, entry.offset, entry.record);
      const due = dueAt(record, route);
      if (due > Date.now()) {
        // Waiting for a retry copy holds no concurrency permit: other partitions keep going.
        await sleep(due - Date.now(), stop);
        continue;
      }
      const release = await this.permits.acquire(stop);
      if (!release) break;
      // Batch fast path (SubscribeOptions.batchHandler), as on Kafka: the run of records already in
      // the log goes to the batch handler in one call; offsets advance over the prefix that is done.
      // One event at a time cost the Data Pool a transaction per event.
      const records = [record];
      if (processor.handleBatch && route.kind !== 'retry') {
        for (let next = entry.offset + 1; records.length < (processor.maxBatchSize ?? 256);) {
          const e = log.read(partition, next);
          if (!e) break;
          records.push(toInbound(topic, partition, e.offset, e.record));
          next = e.offset + 1;
        }
      }
      let done: number;
      try {
        done =
          records.length > 1
            ? await deliverBatch(records, route, processor, env)
            : (await deliver(record, route, processor, env)) === 'interrupted'
              ? 0
              : 1;
      } catch (err) {
        // Only a failed forward to the retry/DLQ topic lands here; keep the messages and try again.
        logger.error('delivery failed; the message will be read again', {
          topic,
          partition,
          offset: entry.offset,
          error: errorMessage(err),
        });
        release();
        await sleep(Math.max(policy.retryDelayMs, 100), stop);
        continue;
      }
      release();
      if (done > 0) this.coordinator.commit(topic, partition, Number(records[done - 1].offset) + 1);
      if (done < records.length) break; // interrupted by a stop
    }
  }
}

function toInbound(topic: string, partition: number, offset: number, record: StoredRecord): InboundRecord {
  return { topic, partition, offset: String(offset), key: record.key, value: record.value, headers: normalizeHeaders(record.headers) };
}
