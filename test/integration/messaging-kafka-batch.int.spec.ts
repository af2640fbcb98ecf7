import { deadLetterTopicOf, TOPICS, type AnyEventEnvelope } from '@anvil/contracts';
import { createBus, stderrLogger, type KafkaConsumerTuning, type MessageBus, type Subscription } from '@anvil/messaging';
import { afterAll, describe, expect, it } from 'vitest';
import { waitFor } from '@anvil/testing';
import { sequencedRolloutStarted } from '@anvil/contracts/testing';

/**
 * The Kafka bus's batch fast path (SubscribeOptions.batchHandler): runs of decodable messages
 * reach the batch handler in partition order, poison messages are dead-lettered around them,
 * and a failing batch falls back to the per-message handler with its usual retries and DLQ.
 */
const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
if (brokers.length === 0) throw new Error('KAFKA_BROKERS is not set (npm test starts a broker)');
const fastGroups: KafkaConsumerTuning = { sessionTimeoutMs: 6_000, heartbeatIntervalMs: 500, rebalanceTimeoutMs: 10_000, maxWaitTimeMs: 200 };
const buses: MessageBus[] = [];
const open = (ns: string) => {
  const bus = createBus({ kind: 'kafka', brokers, clientId: 'batch-int', topicPrefix: ns, consumer: fastGroups, logger: stderrLogger('error'), partitions: 1 });
  buses.push(bus);
  return bus;
};
afterAll(async () => {
  await Promise.all(buses.map((b) => b.close()));
});
const seqOf = (e: AnyEventEnvelope) => (e.type === 'rollout.started' ? e.payload.sampleIndex : -1);

describe('kafka batch delivery', () => {
  it('hands ordered runs to the batch handler and dead-letters poison messages between them', async () => {
    const bus = open(`anvbatch.${Date.now().toString(36)}.a.`);
    const batched: number[][] = [];
    const single: number[] = [];
    const dead: string[] = [];
    const dlq = await bus.subscribeRaw({
      group: 'batch-dlq-reader',
      topics: [deadLetterTopicOf(TOPICS.rollouts, 'batch-a')],
      fromBeginning: true,
      handler: async (r) => void dead.push(r.headers['anvil-dlq-reason']),
    });
    const sub: Subscription = await bus.subscribe({
      group: 'batch-a',
      topics: [TOPICS.rollouts],
      fromBeginning: true,
      handler: async (e) => void single.push(seqOf(e)),
      batchHandler: async (items) => void batched.push(items.map((i) => seqOf(i.event))),
    });
    const events = Array.from({ length: 40 }, (_, i) => sequencedRolloutStarted('key-1', i));
    await bus.publish(events.slice(0, 20));
    await bus.publishRaw(TOPICS.rollouts, { key: 'key-1', value: Buffer.from('not a frame') });
    await bus.publish(events.slice(20));
    await waitFor('all 40 handled', async () => (batched.flat().length + single.length >= 40 ? true : undefined), 60_000);
    await waitFor('poison dead-lettered', async () => (dead.length === 1 ? true : undefined), 30_000);
    await sub.whenIdle({ timeoutMs: 30_000 });
    expect(single).toEqual([]);
    expect(batched.flat()).toEqual(events.map((_, i) => i));
    expect(batched.length).toBeLessThan(40); // runs, not one call per message
    expect(dead).toEqual(['malformed_frame']);
    await sub.stop();
    await dlq.stop();
  });

  it('falls back to the per-message handler when a batch fails, retrying and dead-lettering only the bad event', async () => {
    const bus = open(`anvbatch.${Date.now().toString(36)}.b.`);
    const handled: number[] = [];
    let batchCalls = 0;
    const dead: string[] = [];
    const dlq = await bus.subscribeRaw({
      group: 'batch-dlq-reader',
      topics: [deadLetterTopicOf(TOPICS.rollouts, 'batch-b')],
      fromBeginning: true,
      handler: async (r) => void dead.push(r.headers['anvil-dlq-reason']),
    });
    const sub = await bus.subscribe({
      group: 'batch-b',
      topics: [TOPICS.rollouts],
      fromBeginning: true,
      maxAttempts: 2,
      retryDelayMs: 10,
      retryRounds: 0,
      handler: async (e) => {
        if (seqOf(e) === 7) throw new Error('event 7 is bad');
        handled.push(seqOf(e));
      },
      batchHandler: async (items) => {
        batchCalls++;
        if (items.some((i) => seqOf(i.event) === 7)) throw new Error('batch contains event 7');
        handled.push(...items.map((i) => seqOf(i.event)));
      },
    });
    await bus.publish(Array.from({ length: 15 }, (_, i) => sequencedRolloutStarted('key-2', i)));
    await waitFor('14 good events handled', async () => (handled.length >= 14 ? true : undefined), 60_000);
    await waitFor('event 7 dead-lettered', async () => (dead.length === 1 ? true : undefined), 30_000);
    await sub.whenIdle({ timeoutMs: 30_000 });
    expect(batchCalls).toBeGreaterThan(0);
    expect([...handled].sort((a, b) => a - b)).toEqual(Array.from({ length: 15 }, (_, i) => i).filter((i) => i !== 7));
    expect(dead).toEqual(['handler_failed']);
    await sub.stop();
    await dlq.stop();
  });
});
