import type { EventEnvelope } from '@anvil/contracts';
import type { BusHealth, MessageBus, RawMessage, RawSubscribeOptions, SubscribeOptions, Subscription } from '../bus';
import type { Processor } from '../delivery/deliver';
import { resolveDeliveryPolicy } from '../delivery/policy';
import { eventProcessor, rawProcessor } from '../delivery/processors';
import { stderrLogger, type BusLogger } from '../logger';
import { prepareEvents, prepareRaw, type PreparedMessage } from '../outbound';
import { partitionForKey, RoundRobin } from '../partitioner';
import { SubscriptionTopology, TopicNamespace } from '../topic-names';
import { MemoryBroker } from './memory-broker';
import { MemorySubscription } from './memory-subscription';

export interface MemoryBusOptions {
  /** Share one broker between several clients (services of the embedded process, tests). Default: a private one. */
  broker?: MemoryBroker;
  /** Prepended to every topic name, retry and dead-letter topics included. */
  topicPrefix?: string;
  /** Partitions of topics this client creates. Default 3. */
  partitions?: number;
  logger?: BusLogger;
}

/**
 * The embedded bus: Kafka's semantics in one process. Messages are stored as the same ANV1
 * bytes Kafka would hold, partitioned by the same key hash, and consumed through the same
 * delivery pipeline, so codec failures, retries and dead letters behave as in production.
 */
export class MemoryBus implements MessageBus {
  readonly kind = 'memory' as const;
  readonly broker: MemoryBroker;
  private readonly ns: TopicNamespace;
  private readonly partitions: number;
  private readonly logger: BusLogger;
  private readonly roundRobin = new RoundRobin();
  private readonly subscriptions = new Set<Subscription>();
  private closed = false;

  constructor(options: MemoryBusOptions = {}) {
    this.broker = options.broker ?? new MemoryBroker();
    this.ns = new TopicNamespace(options.topicPrefix);
    this.partitions = options.partitions ?? 3;
    this.logger = options.logger ?? stderrLogger();
  }

  async publish(events: EventEnvelope | readonly EventEnvelope[]): Promise<void> {
    this.assertOpen();
    for (const message of prepareEvents(this.ns, events)) this.append(message);
  }

  async publishRaw(topic: string, message: RawMessage): Promise<void> {
    this.assertOpen();
    const prepared = prepareRaw(this.ns, topic, message);
    // The caller keeps its Buffer; the log must not change if they reuse it.
    this.append({ ...prepared, value: prepared.value ? Buffer.from(prepared.value) : null });
  }

  subscribe(options: SubscribeOptions): Promise<Subscription> {
    return this.start(options, eventProcessor(options.handler, { handler: options.batchHandler, maxSize: options.maxBatchSize }));
  }

  subscribeRaw(options: RawSubscribeOptions): Promise<Subscription> {
    return this.start(options, rawProcessor(options.handler));
  }

  async health(): Promise<BusHealth> {
    return {
      ok: !this.closed,
      detail: { kind: 'memory', closed: this.closed, topics: this.broker.topicCount, subscriptions: this.subscriptions.size },
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.subscriptions].map((s) => s.stop()));
  }

  private async start<T>(options: SubscribeOptions | RawSubscribeOptions, processor: Processor<T>): Promise<Subscription> {
    this.assertOpen();
    const policy = resolveDeliveryPolicy(options);
    const topology = new SubscriptionTopology(this.ns, options.group, options.topics);
    for (const topic of topology.allTopics) this.broker.ensureTopic(topic, this.partitions);
    const subscription: MemorySubscription<T> = new MemorySubscription({
      broker: this.broker,
      topology,
      policy,
      processor,
      logger: this.logger,
      // Retry and dead-letter copies: an append is as durable as this bus gets.
      forward: async (topic, record) => this.append({ topic, ...record }),
      onStopped: () => this.subscriptions.delete(subscription),
    });
    this.subscriptions.add(subscription);
    subscription.start();
    return subscription;
  }

  private append(message: PreparedMessage): void {
    const log = this.broker.ensureTopic(message.topic, this.partitions);
    const partition =
      message.key === null ? this.roundRobin.next(message.topic, log.partitionCount) : partitionForKey(message.key, log.partitionCount);
    const headers: Record<string, Buffer> = {};
    for (const [name, value] of Object.entries(message.headers))
      headers[name] = Buffer.isBuffer(value) ? Buffer.from(value) : Buffer.from(value, 'utf8');
    log.append(partition, { key: message.key, value: message.value, headers, timestamp: Date.now() });
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('message bus is closed');
  }
}
