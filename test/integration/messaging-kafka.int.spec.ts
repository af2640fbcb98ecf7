import { TOPICS } from '@anvil/contracts';
import { createBus, stderrLogger, type KafkaConsumerTuning, type MessageBus } from '@anvil/messaging';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeBusConformance } from '@anvil/messaging/testing';
import { sequencedRolloutStarted } from '@anvil/contracts/testing';

// Real broker: `node tools/infra/kafka.mjs start` prints KAFKA_BROKERS (the test runner does it).
const brokersEnv = process.env.KAFKA_BROKERS;
if (!brokersEnv) throw new Error('KAFKA_BROKERS is not set; start a broker with `node tools/infra/kafka.mjs start`');
const brokers = brokersEnv
  .split(',')
  .map((b) => b.trim())
  .filter(Boolean);

// The broker runs with group.initial.rebalance.delay.ms=0; 6 s is its minimum session timeout.
const fastGroups: KafkaConsumerTuning = {
  sessionTimeoutMs: 6_000,
  heartbeatIntervalMs: 500,
  rebalanceTimeoutMs: 10_000,
  maxWaitTimeMs: 200,
};
const logger = stderrLogger('warn');

const makeBus = (namespace: string, consumer: KafkaConsumerTuning = fastGroups): MessageBus =>
  createBus({ kind: 'kafka', brokers, clientId: 'anvil-messaging-int', topicPrefix: namespace, consumer, logger });

let admin: Admin;
beforeAll(async () => {
  admin = new Kafka({ clientId: 'anvil-messaging-int-admin', brokers, logLevel: logLevel.WARN }).admin();
  await admin.connect();
});
afterAll(async () => {
  await admin?.disconnect();
});

/** Every topic a test created (its namespace prefixes all of them, retry and DLQ included). */
async function deleteNamespace(namespace: string): Promise<void> {
  const topics = (await admin.listTopics()).filter((t) => t.startsWith(namespace));
  if (topics.length > 0) await admin.deleteTopics({ topics, timeout: 30_000 });
}

describeBusConformance('kafka', (namespace) => makeBus(namespace), { cleanup: deleteNamespace, waitMs: 60_000 });

describe('kafka bus specifics', () => {
  const namespace = `anvtest.${Date.now().toString(36)}.specific.`;
  const buses: MessageBus[] = [];
  const open = (consumer?: KafkaConsumerTuning) => {
    const bus = makeBus(namespace, consumer);
    buses.push(bus);
    return bus;
  };
  afterAll(async () => {
    await Promise.all(buses.map((b) => b.close()));
    await deleteNamespace(namespace);
  });

  it('creates topics up front with the configured partitions, retry and dead-letter topics included', async () => {
    const bus = open();
    const group = `g-${Date.now().toString(36)}-topics`;
    const sub = await bus.subscribe({ group, topics: [TOPICS.weights], handler: async () => undefined });
    const expected = [TOPICS.weights, `${TOPICS.weights}.retry.${group}`, `${TOPICS.weights}.dlq.${group}`].map((t) => namespace + t);
    const { topics } = await admin.fetchTopicMetadata({ topics: expected });
    const byName = (a: [string, number], b: [string, number]) => a[0].localeCompare(b[0]);
    expect(topics.map((t): [string, number] => [t.name, t.partitions.length]).sort(byName)).toEqual(
      expected.map((t): [string, number] => [t, 3]).sort(byName),
    );
    await sub.stop();
  });

  it('heartbeats while a handler runs longer than the session timeout, so the group does not rebalance', async () => {
    const bus = open();
    const group = `g-${Date.now().toString(36)}-slow`;
    const deliveries: number[] = [];
    const sub = await bus.subscribe({
      group,
      topics: [TOPICS.rollouts],
      fromBeginning: true,
      handler: async (_event, meta) => {
        deliveries.push(meta.attempt);
        await new Promise((r) => setTimeout(r, fastGroups.sessionTimeoutMs! + 3_000));
      },
    });
    await bus.publish([sequencedRolloutStarted('rollout-slow', 0)]);
    // Without heartbeats the member would be evicted and its commit refused: the message would
    // come back. With them, it is handled once and committed.
    await sub.whenIdle({ timeoutMs: 30_000 });
    expect(deliveries).toEqual([1]);
    await sub.stop();
  });

  it('reports an unreachable broker as unhealthy within the health deadline', async () => {
    const bus = createBus({
      kind: 'kafka',
      brokers: ['127.0.0.1:1'],
      clientId: 'anvil-unreachable',
      healthTimeoutMs: 1_000,
      kafkaLogLevel: 'silent',
      logger,
    });
    buses.push(bus);
    const started = Date.now();
    const health = await bus.health();
    expect(health.ok).toBe(false);
    expect(Date.now() - started).toBeLessThan(3_000);
    const healthy = await open().health();
    expect(healthy.ok).toBe(true);
  });
});
