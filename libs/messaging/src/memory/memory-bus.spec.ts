import { ContractError, deadLetterTopicOf, MAX_EVENT_BYTES, retryTopicOf, TOPICS } from '@anvil/contracts';
import { afterEach, describe, expect, it } from 'vitest';
import type { MessageBus, MessageMeta, RawRecord } from '../bus';
import { HEADERS } from '../headers';
import { silentLogger } from '../logger';
import { describeBusConformance, Inbox, waitUntil } from '../testing/bus-conformance';
import { sequencedRolloutStarted } from '@anvil/contracts/testing';
import { MemoryBroker } from './memory-broker';
import { MemoryBus } from './memory-bus';

// Every client of one test namespace shares a broker, like processes sharing a Kafka cluster.
const brokers = new Map<string, MemoryBroker>();
const brokerFor = (namespace: string) => {
  let broker = brokers.get(namespace);
  if (!broker) brokers.set(namespace, (broker = new MemoryBroker()));
  return broker;
};

describeBusConformance(
  'in-process bus',
  (namespace) => new MemoryBus({ broker: brokerFor(namespace), topicPrefix: namespace, logger: silentLogger }),
  {
    cleanup: async (namespace) => void brokers.delete(namespace),
    waitMs: 10_000,
  },
);

describe('MemoryBus specifics', () => {
  const opened: MessageBus[] = [];
  const open = (broker: MemoryBroker, partitions?: number) => {
    const bus = new MemoryBus({ broker, partitions, logger: silentLogger });
    opened.push(bus);
    return bus;
  };
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((b) => b.close()));
  });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const seqOf = (e: { type: string; payload: unknown }) => (e.payload as { sampleIndex: number }).sampleIndex;

  it('treats an oversized message as poison', async () => {
    const bus = open(new MemoryBroker());
    await bus.subscribe({ group: 'g', topics: [TOPICS.llmCalls], handler: async () => undefined });
    const dead = new Inbox<RawRecord>(5_000);
    await bus.subscribeRaw({ group: 'dlq', topics: [deadLetterTopicOf(TOPICS.llmCalls, 'g')], handler: async (r) => dead.push(r) });
    await bus.publishRaw(TOPICS.llmCalls, { key: 'k', value: Buffer.alloc(MAX_EVENT_BYTES + 1) });
    const [record] = await dead.waitFor(1);
    expect(record.headers[HEADERS.reason]).toBe('oversized');
    expect(record.value!.length).toBe(MAX_EVENT_BYTES + 1);
  });

  it('retries a handler that throws a ContractError instead of treating the message as poison', async () => {
    const bus = open(new MemoryBroker());
    const attempts: number[] = [];
    await bus.subscribe({
      group: 'g',
      topics: [TOPICS.rollouts],
      retryDelayMs: 1,
      handler: async (_e, meta) => {
        attempts.push(meta.attempt);
        if (meta.attempt === 1) throw new ContractError('invalid_payload', 'a downstream contract check failed');
      },
    });
    await bus.publish(sequencedRolloutStarted('k', 0));
    await waitUntil(() => attempts.length === 2, 5_000, 'the second attempt');
    expect(attempts).toEqual([1, 2]);
  });

  it('runs at most `concurrency` handlers at once', async () => {
    for (const concurrency of [1, 2]) {
      const bus = open(new MemoryBroker());
      let active = 0;
      let peak = 0;
      let done = 0;
      await bus.subscribe({
        group: 'g',
        topics: [TOPICS.rollouts],
        concurrency,
        handler: async () => {
          peak = Math.max(peak, ++active);
          await sleep(5);
          active--;
          done++;
        },
      });
      // Keys spread over all three partitions.
      await bus.publish(Array.from({ length: 30 }, (_, i) => sequencedRolloutStarted(`rollout-${i}`, 0)));
      await waitUntil(() => done === 30, 5_000, 'all handled');
      expect(peak).toBe(concurrency);
    }
  });

  it('hands a partition over on rebalance only after the in-flight message is committed', async () => {
    const broker = new MemoryBroker();
    const producer = open(broker);
    const activePerPartition = new Map<number, number>();
    let overlap = false;
    const handled: { key: string; seq: number }[] = [];
    const handler = async (event: { key: string; type: string; payload: unknown }, meta: MessageMeta) => {
      const n = (activePerPartition.get(meta.partition) ?? 0) + 1;
      activePerPartition.set(meta.partition, n);
      if (n > 1) overlap = true;
      await sleep(2);
      handled.push({ key: event.key, seq: seqOf(event) });
      activePerPartition.set(meta.partition, n - 1);
    };
    const members = [await open(broker).subscribe({ group: 'g', topics: [TOPICS.rollouts], concurrency: 3, handler })];
    const keys = ['a', 'b', 'c', 'd', 'e', 'f'];
    const perKey = 15;
    const publishing = (async () => {
      for (let seq = 0; seq < perKey; seq++) {
        await producer.publish(keys.map((k) => sequencedRolloutStarted(k, seq)));
        await sleep(3);
      }
    })();
    // Members join and leave while messages flow.
    for (let i = 0; i < 4; i++) {
      await sleep(10);
      members.push(await open(broker).subscribe({ group: 'g', topics: [TOPICS.rollouts], concurrency: 3, handler }));
      if (i % 2 === 1) await members.shift()!.stop();
    }
    await publishing;
    await waitUntil(() => handled.length >= keys.length * perKey, 10_000, 'all handled');
    await members[0].whenIdle();
    expect(overlap).toBe(false);
    expect(handled).toHaveLength(keys.length * perKey); // no redelivery: every handoff committed first
    for (const key of keys) {
      expect(handled.filter((h) => h.key === key).map((h) => h.seq)).toEqual(Array.from({ length: perKey }, (_, i) => i));
    }
  });

  it('stops promptly while a retry copy waits for its delay, and leaves the copy uncommitted', async () => {
    const bus = open(new MemoryBroker());
    let calls = 0;
    const sub = await bus.subscribe({
      group: 'g',
      topics: [TOPICS.rollouts],
      maxAttempts: 1,
      retryTopicDelayMs: 60_000,
      handler: async () => {
        calls++;
        throw new Error('down');
      },
    });
    await bus.publish(sequencedRolloutStarted('k', 0));
    const retryTopic = retryTopicOf(TOPICS.rollouts, 'g');
    await waitUntil(() => calls === 1, 5_000, 'first attempt');
    await sub.whenIdle({ timeoutMs: 200 }).catch(() => undefined);
    const lag = await sub.lag();
    expect(lag.filter((p) => p.topic === retryTopic).reduce((n, p) => n + p.lag, 0)).toBe(1);
    const started = Date.now();
    await sub.stop();
    expect(Date.now() - started).toBeLessThan(500);
    expect(calls).toBe(1);
  });

  it('drops consumed records (unless retainConsumed) and keeps what a group still needs', async () => {
    for (const retainConsumed of [false, true]) {
      const broker = new MemoryBroker({ retainConsumed });
      const bus = open(broker, 1);
      const fast = await bus.subscribe({ group: 'fast', topics: [TOPICS.rollouts], handler: async () => undefined });
      const slowGate = { open: false };
      const slow = await bus.subscribe({
        group: 'slow',
        topics: [TOPICS.rollouts],
        handler: async () => {
          await waitUntil(() => slowGate.open, 5_000, 'gate');
        },
      });
      await bus.publish(Array.from({ length: 5 }, (_, i) => sequencedRolloutStarted('k', i)));
      await fast.whenIdle();
      const log = broker.requireLog(TOPICS.rollouts);
      // The slow group has not committed: nothing may be dropped yet.
      expect(log.startOffset(0)).toBe(0);
      slowGate.open = true;
      await slow.whenIdle();
      expect(log.startOffset(0)).toBe(retainConsumed ? 0 : 5);
      expect(log.endOffset(0)).toBe(5);
    }
  });

  it('hands raw subscribers their own copy of the bytes', async () => {
    const broker = new MemoryBroker({ retainConsumed: true }); // group b reads after group a
    const bus = open(broker);
    const first = new Inbox<RawRecord>(5_000);
    const second = new Inbox<RawRecord>(5_000);
    await bus.subscribeRaw({ group: 'a', topics: ['tools.raw'], handler: async (r) => void first.push(r) });
    const original = Buffer.from('payload');
    await bus.publishRaw('tools.raw', { key: 'k', value: original, headers: { h: 'v' } });
    original.fill(0); // the publisher reusing its buffer must not change the stored message
    const [a] = await first.waitFor(1);
    a.value!.fill(1); // nor may a consumer scribbling on what it got
    await bus.subscribeRaw({ group: 'b', topics: ['tools.raw'], fromBeginning: true, handler: async (r) => void second.push(r) });
    const [b] = await second.waitFor(1);
    expect(b.value!.toString()).toBe('payload');
    expect(b.headers.h).toBe('v');
  });

  it('rejects use after close and reports itself unhealthy', async () => {
    const bus = open(new MemoryBroker());
    const sub = await bus.subscribe({ group: 'g', topics: [TOPICS.rollouts], handler: async () => undefined });
    expect((await bus.health()).ok).toBe(true);
    await bus.close();
    await expect(bus.publish(sequencedRolloutStarted('k', 0))).rejects.toThrow(/closed/);
    await expect(bus.subscribe({ group: 'g', topics: [TOPICS.rollouts], handler: async () => undefined })).rejects.toThrow(/closed/);
    expect((await bus.health()).ok).toBe(false);
    await sub.stop(); // already stopped by close(): resolves again
  });

  it('refuses a subscription without a usable group', async () => {
    const bus = open(new MemoryBroker());
    await expect(bus.subscribe({ group: '', topics: [TOPICS.rollouts], handler: async () => undefined })).rejects.toThrow(/consumer group/);
    await expect(bus.subscribe({ group: 'has space', topics: [TOPICS.rollouts], handler: async () => undefined })).rejects.toThrow(
      /consumer group/,
    );
    await expect(bus.subscribe({ group: 'g', topics: [TOPICS.rollouts], maxAttempts: 0, handler: async () => undefined })).rejects.toThrow(
      /maxAttempts/,
    );
  });
});
