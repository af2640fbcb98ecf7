import type { EventEnvelope } from '@anvil/contracts';
import { Kafka, type Admin, type ICustomPartitioner, type Producer } from 'kafkajs';
import type { BusHealth, MessageBus, RawMessage, RawSubscribeOptions, SubscribeOptions, Subscription } from '../bus';
import type { OutboundRecord, Processor } from '../delivery/deliver';
import { resolveDeliveryPolicy } from '../delivery/policy';
import { eventProcessor, rawProcessor } from '../delivery/processors';
import { errorMessage, stderrLogger, type BusLogger } from '../logger';
import { prepareEvents, prepareRaw, type PreparedMessage } from '../outbound';
import { partitionForKey, RoundRobin } from '../partitioner';
import { SubscriptionTopology, TopicNamespace } from '../topic-names';
import { KafkaSubscription } from './kafka-consumer';
import { kafkaLogCreator, kafkaLogLevel } from './kafka-logger';
import { KAFKA_DEFAULTS, validateKafkaOptions, type KafkaBusOptions, type ResolvedConsumerTuning } from './kafka-options';
import { TopicAdmin } from './topic-admin';

/** How long close() waits for a client that is still connecting. */
const CLOSE_CONNECT_WAIT_MS = 2_000;

/** The shared partitioner (murmur2, as every Kafka client), so both buses place keys alike. */
const anvilPartitioner: ICustomPartitioner = () => {
  const roundRobin = new RoundRobin();
  return ({ topic, partitionMetadata, message }) => {
    if (message.partition !== undefined && message.partition !== null) return message.partition;
    const count = partitionMetadata.length;
    if (message.key === null || message.key === undefined) return roundRobin.next(topic, count);
    return partitionForKey(message.key, count);
  };
};

/**
 * The Kafka bus (kafkajs). One idempotent producer (acks=all) per bus; one consumer per
 * subscription, in the group the caller names. Connections are made lazily, so constructing the
 * bus never blocks a service's startup; health() tells /readyz whether the broker answers.
 */
export class KafkaBus implements MessageBus {
  readonly kind = 'kafka' as const;
  private readonly kafka: Kafka;
  private readonly ns: TopicNamespace;
  private readonly logger: BusLogger;
  private readonly topicAdmin: TopicAdmin;
  private readonly tuning: ResolvedConsumerTuning;
  private readonly subscriptions = new Set<KafkaSubscription<unknown>>();
  private producerReady?: Promise<Producer>;
  private adminReady?: Promise<Admin>;
  private closing?: Promise<void>;

  constructor(private readonly options: KafkaBusOptions) {
    validateKafkaOptions(options);
    this.ns = new TopicNamespace(options.topicPrefix);
    this.logger = options.logger ?? stderrLogger();
    this.tuning = { ...KAFKA_DEFAULTS.consumer, ...options.consumer };
    this.kafka = new Kafka({
      clientId: options.clientId,
      brokers: options.brokers,
      ssl: options.ssl,
      sasl: options.sasl,
      connectionTimeout: options.connectionTimeoutMs ?? KAFKA_DEFAULTS.connectionTimeoutMs,
      requestTimeout: options.requestTimeoutMs ?? KAFKA_DEFAULTS.requestTimeoutMs,
      logLevel: kafkaLogLevel(options.kafkaLogLevel ?? KAFKA_DEFAULTS.kafkaLogLevel),
      logCreator: kafkaLogCreator(this.logger, kafkaLogLevel(options.kafkaLogLevel ?? KAFKA_DEFAULTS.kafkaLogLevel)),
    });
    this.topicAdmin = new TopicAdmin(
      () => this.admin(),
      {
        partitions: options.partitions ?? KAFKA_DEFAULTS.partitions,
        replicationFactor: options.replicationFactor ?? KAFKA_DEFAULTS.replicationFactor,
        maxMessageBytes: this.maxMessageBytes,
      },
      this.logger,
    );
  }

  async publish(events: EventEnvelope | readonly EventEnvelope[]): Promise<void> {
    this.assertOpen();
    await this.send(prepareEvents(this.ns, events));
  }

  async publishRaw(topic: string, message: RawMessage): Promise<void> {
    this.assertOpen();
    await this.send([prepareRaw(this.ns, topic, message)]);
  }

  subscribe(options: SubscribeOptions): Promise<Subscription> {
    return this.start(options, eventProcessor(options.handler, { handler: options.batchHandler, maxSize: options.maxBatchSize }));
  }

  subscribeRaw(options: RawSubscribeOptions): Promise<Subscription> {
    return this.start(options, rawProcessor(options.handler));
  }

  async health(): Promise<BusHealth> {
    if (this.closing) return { ok: false, detail: { kind: 'kafka', closed: true } };
    const timeoutMs = this.options.healthTimeoutMs ?? KAFKA_DEFAULTS.healthTimeoutMs;
    try {
      const cluster = await withTimeout(
        this.admin().then((admin) => admin.describeCluster()),
        timeoutMs,
        `no answer from ${this.options.brokers.join(',')} within ${timeoutMs} ms`,
      );
      const crashed = [...this.subscriptions].filter((s) => s.failure).map((s) => ({ group: s.group, error: errorMessage(s.failure) }));
      return {
        ok: crashed.length === 0,
        detail: {
          kind: 'kafka',
          clusterId: cluster.clusterId,
          brokers: cluster.brokers.length,
          subscriptions: this.subscriptions.size,
          crashed,
        },
      };
    } catch (err) {
      return { ok: false, detail: { kind: 'kafka', brokers: this.options.brokers, error: errorMessage(err) } };
    }
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      await Promise.allSettled([...this.subscriptions].map((s) => s.stop()));
      const disconnect = async (client: Promise<Producer | Admin> | undefined) => {
        // A client still retrying its first connection (broker unreachable) has nothing to
        // flush; waiting for kafkajs's retries to give up would outlast any shutdown deadline.
        const connected = client && (await withTimeout(client, CLOSE_CONNECT_WAIT_MS, 'not connected').catch(() => undefined));
        await connected
          ?.disconnect()
          .catch((err: unknown) => this.logger.warn('kafka client did not disconnect cleanly', { error: errorMessage(err) }));
      };
      await Promise.all([disconnect(this.producerReady), disconnect(this.adminReady)]);
    })();
    return this.closing;
  }

  private get maxMessageBytes(): number {
    return this.options.maxMessageBytes ?? KAFKA_DEFAULTS.maxMessageBytes;
  }

  private async start<T>(options: SubscribeOptions | RawSubscribeOptions, processor: Processor<T>): Promise<Subscription> {
    this.assertOpen();
    const policy = resolveDeliveryPolicy(options);
    const topology = new SubscriptionTopology(this.ns, options.group, options.topics);
    await this.topicAdmin.ensure(topology.allTopics);
    const subscription: KafkaSubscription<T> = new KafkaSubscription({
      kafka: this.kafka,
      admin: () => this.admin(),
      topology,
      policy,
      processor,
      tuning: this.tuning,
      maxBytesPerPartition: this.maxMessageBytes,
      logger: this.logger,
      forward: (topic, record) => this.forward(topic, record),
      onStopped: () => this.subscriptions.delete(subscription as KafkaSubscription<unknown>),
    });
    this.subscriptions.add(subscription as KafkaSubscription<unknown>);
    try {
      await subscription.start();
    } catch (err) {
      await subscription.stop({ timeoutMs: 0 });
      throw err;
    }
    return subscription;
  }

  /** Retry and dead-letter copies: same durable path as publish, allowed while closing. */
  private forward(topic: string, record: OutboundRecord): Promise<void> {
    return this.send([{ topic, ...record }]);
  }

  private async send(messages: PreparedMessage[]): Promise<void> {
    if (messages.length === 0) return;
    const byTopic = new Map<string, PreparedMessage[]>();
    for (const m of messages) byTopic.set(m.topic, [...(byTopic.get(m.topic) ?? []), m]);
    await this.topicAdmin.ensure([...byTopic.keys()]);
    const producer = await this.producer();
    await producer.sendBatch({
      acks: -1,
      timeout: this.options.requestTimeoutMs ?? KAFKA_DEFAULTS.requestTimeoutMs,
      topicMessages: [...byTopic].map(([topic, list]) => ({
        topic,
        messages: list.map((m) => ({ key: m.key, value: m.value, headers: m.headers })),
      })),
    });
  }

  private producer(): Promise<Producer> {
    this.producerReady ??= this.connect(
      this.kafka.producer({
        // Idempotence: broker-side dedupe of the producer's own retries, in order per partition.
        idempotent: true,
        maxInFlightRequests: this.options.maxInFlightRequests ?? KAFKA_DEFAULTS.maxInFlightRequests,
        allowAutoTopicCreation: false,
        createPartitioner: anvilPartitioner,
      }),
      () => (this.producerReady = undefined),
    );
    return this.producerReady;
  }

  private admin(): Promise<Admin> {
    this.adminReady ??= this.connect(this.kafka.admin(), () => (this.adminReady = undefined));
    return this.adminReady;
  }

  /** Connects once; a failed connect is forgotten so the next call tries again. */
  private async connect<C extends Producer | Admin>(client: C, forget: () => void): Promise<C> {
    try {
      await client.connect();
      return client;
    } catch (err) {
      forget();
      throw err;
    }
  }

  private assertOpen(): void {
    if (this.closing) throw new Error('message bus is closed');
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
