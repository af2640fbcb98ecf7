import type { SASLOptions } from 'kafkajs';
import type { BusLogger, BusLogLevel } from '../logger';

export interface KafkaConsumerTuning {
  /** Broker drops a member that has not heartbeated for this long. Default 30 s (broker minimum is usually 6 s). */
  sessionTimeoutMs?: number;
  /** How long a rebalance waits for members to rejoin. Default 60 s. */
  rebalanceTimeoutMs?: number;
  /** Heartbeat period, also while a handler runs. Default 3 s. */
  heartbeatIntervalMs?: number;
  /** Fetch long-poll. Bounds how fast an idle member notices a rebalance or a stop. Default 1 s. */
  maxWaitTimeMs?: number;
  /**
   * Within a fetched batch, commit at most this often (a batch's end, a stop and a rebalance
   * always commit). 0 commits after every message: the fewest redeliveries after a crash, one
   * broker round trip per message (about 4x fewer messages a second on a local broker). Default 100 ms.
   */
  commitIntervalMs?: number;
}

export interface KafkaBusOptions {
  brokers: string[];
  clientId: string;
  /** Prepended to every topic name, retry and dead-letter topics included (tests, side-by-side deployments). */
  topicPrefix?: string;
  /** Partitions of topics this bus creates. Default 3. Existing topics keep theirs. */
  partitions?: number;
  /** Replication factor of created topics; -1 takes the broker's default.replication.factor. Default -1. */
  replicationFactor?: number;
  /** Topic max.message.bytes of created topics (also the consumer's per-partition fetch size). Default 16 MiB. */
  maxMessageBytes?: number;
  /** Producer requests in flight per broker connection, 1..5 (the idempotent producer's limit). Default 1. */
  maxInFlightRequests?: number;
  /** Where kafkajs' and the bus's own logs go. Default: warnings and errors to stderr. */
  logger?: BusLogger;
  /** Minimum kafkajs log level passed to `logger`. Default 'warn'. */
  kafkaLogLevel?: BusLogLevel;
  ssl?: boolean;
  sasl?: SASLOptions;
  /** TCP connect timeout. Default 3 s. */
  connectionTimeoutMs?: number;
  /** Broker request timeout, also the produce ack timeout. Default 30 s. */
  requestTimeoutMs?: number;
  /** Deadline of health() (describeCluster). Default 2 s. */
  healthTimeoutMs?: number;
  consumer?: KafkaConsumerTuning;
}

export const KAFKA_DEFAULTS = {
  partitions: 3,
  replicationFactor: -1,
  maxMessageBytes: 16 * 1024 * 1024,
  maxInFlightRequests: 1,
  kafkaLogLevel: 'warn' as BusLogLevel,
  connectionTimeoutMs: 3_000,
  requestTimeoutMs: 30_000,
  healthTimeoutMs: 2_000,
  consumer: {
    sessionTimeoutMs: 30_000,
    rebalanceTimeoutMs: 60_000,
    heartbeatIntervalMs: 3_000,
    maxWaitTimeMs: 1_000,
    commitIntervalMs: 100,
  },
};

export type ResolvedConsumerTuning = Required<KafkaConsumerTuning>;

export function validateKafkaOptions(options: KafkaBusOptions): void {
  if (
    !Array.isArray(options.brokers) ||
    options.brokers.length === 0 ||
    options.brokers.some((b) => typeof b !== 'string' || b.trim() === '')
  ) {
    throw new Error('kafka bus: brokers must be a non-empty list of host:port');
  }
  if (!options.clientId) throw new Error('kafka bus: clientId is required');
  const inFlight = options.maxInFlightRequests ?? KAFKA_DEFAULTS.maxInFlightRequests;
  if (!Number.isInteger(inFlight) || inFlight < 1 || inFlight > 5) {
    throw new Error(`kafka bus: maxInFlightRequests must be 1..5 for the idempotent producer (got ${inFlight})`);
  }
}
