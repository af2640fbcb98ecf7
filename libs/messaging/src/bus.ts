import type { AnyEventEnvelope, ContractErrorReason, EventEnvelope } from '@anvil/contracts';

/**
 * The message bus every service talks to: one interface, two implementations (Kafka for the
 * distributed deployment, an in-process bus for the embedded single-process default) that
 * pass the same conformance suite (src/testing/bus-conformance.ts).
 *
 * Guarantees, for both implementations:
 * - Events are stored as ANV1 frames (`encodeEvent`), on topic `topicOf(event.type)`, keyed by
 *   `event.key`; a key always maps to the same partition (Kafka's murmur2 partitioner), so one
 *   key's events are handled in publish order by one consumer of a group at a time.
 * - At-least-once: an offset is committed only after the handler succeeded or the message was
 *   durably forwarded to the retry or dead-letter topic. A consumer that dies (or is stopped
 *   past its deadline) before committing leaves the message to the next member of its group.
 *   Handlers must be idempotent by `event.id` (the persistence lib owns that).
 * - Failures: a handler error is retried in-process (`maxAttempts`, exponential backoff from
 *   `retryDelayMs`) while the partition waits, preserving per-key order. When those attempts
 *   are spent the message moves to the group's retry topic (`retryTopicOf`), which the same
 *   group consumes after `retryTopicDelayMs`, for `retryRounds` passes; after that it goes to
 *   the group's dead-letter topic (`deadLetterTopicOf`). Moving a message to the retry topic
 *   lets later messages of the same key overtake it: order is kept for healthy messages, not
 *   for ones that keep failing.
 * - Poison messages (not a frame, malformed, unknown type/version, invalid payload, oversized)
 *   are never handed to the handler and never retried: they go straight to the dead-letter topic
 *   with `ContractError.reason`, and the partition moves on.
 *
 * Topic names in this API are always logical (`TOPICS.*`, `retryTopicOf(...)`,
 * `deadLetterTopicOf(...)`); a bus created with `topicPrefix` adds it to every topic it touches.
 */
export interface MessageBus {
  readonly kind: 'kafka' | 'memory';

  /**
   * Publishes events; resolves once they are durable (Kafka: acks from all in-sync replicas).
   * Every event is encoded before anything is sent: one invalid or oversized event rejects the
   * whole call with its `ContractError` and nothing is sent. (A broker failure in the middle of
   * a multi-topic batch can still leave part of it written; callers retry, consumers dedupe.)
   */
  publish(events: EventEnvelope | readonly EventEnvelope[]): Promise<void>;

  /** Writes bytes as they are, for tools and tests (e.g. poison messages, DLQ replays). */
  publishRaw(topic: string, message: RawMessage): Promise<void>;

  /** Joins consumer group `group`; resolves once the member has joined (partitions assigned). */
  subscribe(options: SubscribeOptions): Promise<Subscription>;

  /**
   * Like `subscribe`, but hands over the stored bytes without decoding (for DLQ inspection and
   * replay tools). Failing handlers are retried and dead-lettered exactly like `subscribe`.
   */
  subscribeRaw(options: RawSubscribeOptions): Promise<Subscription>;

  /** For /readyz: Kafka checks the broker answers (describeCluster with a short deadline). */
  health(): Promise<BusHealth>;

  /** Stops every subscription gracefully, then releases connections. Idempotent. */
  close(): Promise<void>;
}

export interface RawMessage {
  /** Partition key; null spreads messages round-robin. */
  key: string | null;
  value: Buffer | null;
  headers?: Record<string, string | Buffer>;
}

/** Where a message was published (for retried messages: where it was first published). */
export interface MessageMeta {
  /** Logical topic the message was published to. */
  topic: string;
  partition: number;
  /** Kafka offsets are 64-bit; kept as the decimal string Kafka uses. */
  offset: string;
  group: string;
  /** 1-based handler attempt, counted across the retry topic (attempts 1..maxAttempts come from the first delivery). */
  attempt: number;
  /** Where this copy was read from: the original topic, or the group's retry topic. */
  deliveredFrom: { topic: string; partition: number; offset: string };
  /** Message headers as UTF-8 strings (trace context, delivery bookkeeping). */
  headers: Readonly<Record<string, string>>;
}

export type EventHandler = (event: AnyEventEnvelope, meta: MessageMeta) => Promise<void>;

export interface RawRecord {
  key: string | null;
  value: Buffer | null;
  headers: Readonly<Record<string, string>>;
}
export type RawHandler = (record: RawRecord, meta: MessageMeta) => Promise<void>;

export interface DeliveryOptions {
  /** Consumer group: one per service role. Required, no default: two services must never share one by accident. */
  group: string;
  /** Logical topic names (`TOPICS.*`). */
  topics: readonly string[];
  /** Handler attempts per delivery, in process, before the message moves on to the retry topic. Default 3. */
  maxAttempts?: number;
  /** Backoff before the 2nd in-process attempt; doubles per attempt, capped at 30 s. Default 200 ms. */
  retryDelayMs?: number;
  /** How long a message waits in the retry topic before it is attempted again. Default 5 s. */
  retryTopicDelayMs?: number;
  /** Passes through the retry topic before the message is dead-lettered (0: straight to the DLQ). Default 1. */
  retryRounds?: number;
  /** Partitions handled in parallel by this member (one message at a time per partition). Default 1. */
  concurrency?: number;
  /**
   * Where a group without a committed offset starts: the oldest retained message (true) or the
   * end of the log (false, Kafka's default). The retry topic is always read from the beginning.
   */
  fromBeginning?: boolean;
}

export interface SubscribeOptions extends DeliveryOptions {
  handler: EventHandler;
  /**
   * Optional fast path for throughput-bound consumers (e.g. the Data Pool writing one database
   * transaction per batch instead of per event). The Kafka bus hands it runs of consecutive,
   * decodable messages of one partition (at most `maxBatchSize`); offsets are committed only
   * after it resolves. If it throws, the same messages go through `handler` one by one with
   * the usual attempts, retry topic and dead-letter topic, so `handler` stays the source of
   * truth and both must be idempotent by event id. Poison messages never reach it. Buses may
   * ignore it (the in-process bus does) and call `handler` per message.
   */
  batchHandler?: EventBatchHandler;
  /** Largest run handed to `batchHandler`. Default 256. */
  maxBatchSize?: number;
}

export type EventBatchHandler = (items: ReadonlyArray<{ event: AnyEventEnvelope; meta: MessageMeta }>) => Promise<void>;

export interface RawSubscribeOptions extends DeliveryOptions {
  handler: RawHandler;
}

export interface StopOptions {
  /**
   * How long to wait for in-flight handlers. Past it they are abandoned: their messages stay
   * uncommitted and go to the next member (the handler promise itself cannot be cancelled).
   * Default 30 s; 0 simulates a crash.
   */
  timeoutMs?: number;
}

export interface PartitionLag {
  /** Logical topic (the group's retry topic included). */
  topic: string;
  partition: number;
  /** Next offset the group will read. */
  committed: number;
  /** Offset the next published message will get. */
  end: number;
  lag: number;
}

export interface Subscription {
  readonly group: string;
  readonly topics: readonly string[];
  /**
   * Leaves the group gracefully: no new message is started, waits (backoff and retry-topic
   * delays are cut short) for in-flight handlers, commits what succeeded, leaves the rest
   * uncommitted for the next member.
   */
  stop(options?: StopOptions): Promise<void>;
  /** Per partition of the subscribed topics and the group's retry topics. */
  lag(): Promise<PartitionLag[]>;
  /** Resolves when every subscribed partition (retry topics included) is fully committed. */
  whenIdle(options?: { timeoutMs?: number; pollMs?: number }): Promise<void>;
}

export interface BusHealth {
  ok: boolean;
  detail: Record<string, unknown>;
}

/** Why a message ended in the dead-letter topic (`anvil-dlq-reason` header). */
export type DeadLetterReason = ContractErrorReason | 'handler_failed';
