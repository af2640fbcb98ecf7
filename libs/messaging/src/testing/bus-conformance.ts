import {
  ContractError,
  deadLetterTopicOf,
  encodeFrame,
  retryTopicOf,
  TOPICS,
  topicOf,
  type AnyEventEnvelope,
  type EventEnvelope,
} from '@anvil/contracts';
import { bitExact, oneOfEachType, sampleLlmCallEvent, sequencedRolloutStarted } from '@anvil/contracts/testing';
import { trace } from '@opentelemetry/api';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { MessageBus, MessageMeta, RawRecord } from '../bus';
import { HEADERS } from '../headers';
import { partitionForKey } from '../partitioner';
import { bindTraceContext } from '../trace-propagation';
import { installTestTracing, withRemoteParent } from './trace-kit';

/**
 * The behaviour every MessageBus must show, run against real components: the in-process bus
 * (libs/messaging/src/memory/memory-bus.spec.ts) and a real Kafka broker
 * (test/integration/messaging-kafka.int.spec.ts).
 *
 * `makeBus(namespace)` returns a new client; all clients made with one namespace must share
 * topics and consumer groups (Kafka: the same `topicPrefix`; memory: the same MemoryBroker), so
 * a test can play several producers or a consumer that dies and one that takes over.
 */
export interface BusConformanceOptions {
  /** After each test, with its namespace (e.g. delete that test's Kafka topics). */
  cleanup?(namespace: string): Promise<void>;
  /** Longest wait for one expected delivery. Default 20 s. */
  waitMs?: number;
  /** Partitions the bus gives new topics. Default 3 (both buses' default). */
  partitions?: number;
}

export function describeBusConformance(
  name: string,
  makeBus: (namespace: string) => MessageBus | Promise<MessageBus>,
  options: BusConformanceOptions = {},
): void {
  const waitMs = options.waitMs ?? 20_000;
  const partitions = options.partitions ?? 3;

  describe(`message bus conformance: ${name}`, () => {
    const run = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
    let testIndex = 0;
    let namespace = '';
    let opened: MessageBus[] = [];
    let uninstallTracing: (() => void) | undefined;

    beforeAll(() => {
      uninstallTracing = installTestTracing();
    });
    afterAll(() => uninstallTracing?.());
    beforeEach(() => {
      testIndex++;
      namespace = `anvtest.${run}.${testIndex}.`;
      opened = [];
    });
    afterEach(async () => {
      await Promise.all(opened.map((bus) => bus.close()));
      await options.cleanup?.(namespace);
    });

    /** A new client in this test's namespace (a separate "process" on the same cluster). */
    const connect = async () => {
      const bus = await makeBus(namespace);
      opened.push(bus);
      return bus;
    };
    const groupName = (label: string) => `g-${run}-${testIndex}-${label}`;
    const fast = { retryDelayMs: 10, retryTopicDelayMs: 200, fromBeginning: true } as const;

    const collect = async (
      bus: MessageBus,
      group: string,
      topics: readonly string[],
      extra: Partial<Parameters<MessageBus['subscribe']>[0]> = {},
    ) => {
      const inbox = new Inbox<{ event: AnyEventEnvelope; meta: MessageMeta }>(waitMs);
      const sub = await bus.subscribe({ ...fast, group, topics, handler: async (event, meta) => inbox.push({ event, meta }), ...extra });
      return { inbox, sub };
    };

    const readDeadLetters = async (bus: MessageBus, topic: string, group: string) => {
      const inbox = new Inbox<{ record: RawRecord; meta: MessageMeta }>(waitMs);
      await bus.subscribeRaw({
        ...fast,
        group: `${group}-dlq`,
        topics: [deadLetterTopicOf(topic, group)],
        handler: async (record, meta) => inbox.push({ record, meta }),
      });
      return inbox;
    };

    it('round-trips every event type bit-exactly, typed arrays included, on its own topic', async () => {
      const bus = await connect();
      const { inbox, sub } = await collect(bus, groupName('all'), Object.values(TOPICS));
      const sent = oneOfEachType('rollout-a');
      await bus.publish(sent);
      const got = await inbox.waitFor(sent.length);
      for (const expected of sent) {
        const match = got.find((g) => g.event.id === expected.id);
        if (!match) throw new Error(`${expected.type} was not delivered`);
        expect(bitExact(match.event)).toEqual(bitExact(expected));
        expect(match.meta.topic).toBe(topicOf(expected.type));
        expect(match.meta.attempt).toBe(1);
        expect(match.meta.headers[HEADERS.eventType]).toBe(expected.type);
        expect(match.meta.headers[HEADERS.eventId]).toBe(expected.id);
      }
      await sub.whenIdle({ timeoutMs: waitMs });
      expect((await sub.lag()).every((p) => p.lag === 0)).toBe(true);
      expect((await bus.health()).ok).toBe(true);
    });

    it('round-trips a 256k-token llm_call.recorded bit-exactly', async () => {
      const bus = await connect();
      const { inbox } = await collect(bus, groupName('big'), [TOPICS.llmCalls]);
      const event = sampleLlmCallEvent({ promptTokens: 256 * 1024, outputTokens: 256 * 1024, seed: 42 });
      await bus.publish(event);
      const [got] = await inbox.waitFor(1);
      expect(got.event.type).toBe('llm_call.recorded');
      expect(bitExact(got.event)).toEqual(bitExact(event));
    });

    it('keeps each key in order under concurrent producers', async () => {
      const consumer = await connect();
      const { inbox } = await collect(consumer, groupName('order'), [TOPICS.rollouts], { concurrency: 3 });
      const producers = await Promise.all([0, 1, 2, 3].map(() => connect()));
      const keysPerProducer = 4;
      const perKey = 20;
      await Promise.all(
        producers.flatMap((bus, p) =>
          Array.from({ length: keysPerProducer }, async (_, k) => {
            const key = `rollout-p${p}-k${k}`;
            // Alternate single events and small batches; each key's publishes are sequential.
            for (let seq = 0; seq < perKey;) {
              if (seq % 3 === 0 && seq + 2 <= perKey) {
                await bus.publish([sequencedRolloutStarted(key, seq), sequencedRolloutStarted(key, seq + 1)]);
                seq += 2;
              } else {
                await bus.publish(sequencedRolloutStarted(key, seq));
                seq += 1;
              }
            }
          }),
        ),
      );
      const total = producers.length * keysPerProducer * perKey;
      const got = await inbox.waitFor(total);
      const byKey = new Map<string, number[]>();
      for (const { event } of got) {
        if (event.type !== 'rollout.started') throw new Error(`unexpected ${event.type}`);
        byKey.set(event.key, [...(byKey.get(event.key) ?? []), event.payload.sampleIndex]);
      }
      expect(byKey.size).toBe(producers.length * keysPerProducer);
      for (const [key, seqs] of byKey) expect(seqs, key).toEqual(Array.from({ length: perKey }, (_, i) => i));
    });

    it('places each key on the partition a Kafka producer would (murmur2)', async () => {
      const bus = await connect();
      const { inbox } = await collect(bus, groupName('placement'), [TOPICS.rollouts]);
      const keys = Array.from({ length: 12 }, (_, i) => `rollout-${i}`);
      await bus.publish(keys.map((k) => sequencedRolloutStarted(k, 0)));
      const got = await inbox.waitFor(keys.length);
      for (const { event, meta } of got) expect(meta.partition, event.key).toBe(partitionForKey(event.key, partitions));
      expect(new Set(got.map((g) => g.meta.partition)).size).toBe(Math.min(partitions, 3));
    });

    it('splits partitions between members of one group and hands each message to one of them', async () => {
      const group = groupName('shared');
      const [a, b] = [await connect(), await connect()];
      const first = await collect(a, group, [TOPICS.rollouts]);
      const second = await collect(b, group, [TOPICS.rollouts]);
      const events = Array.from({ length: 30 }, (_, i) => sequencedRolloutStarted(`rollout-${i}`, 0));
      await a.publish(events);
      await waitUntil(() => first.inbox.items.length + second.inbox.items.length >= events.length, waitMs, 'all 30 messages');
      const ids = [...first.inbox.items, ...second.inbox.items].map((g) => g.event.id);
      expect(new Set(ids).size).toBe(events.length);
      expect(ids.length).toBe(events.length);
      const partitionsOf = (items: { meta: MessageMeta }[]) => new Set(items.map((g) => g.meta.partition));
      const [pa, pb] = [partitionsOf(first.inbox.items), partitionsOf(second.inbox.items)];
      expect(pa.size).toBeGreaterThan(0);
      expect(pb.size).toBeGreaterThan(0);
      expect([...pa].filter((p) => pb.has(p))).toEqual([]);
    });

    it('starts a new group at the end of the log unless fromBeginning, and loses nothing published after subscribe', async () => {
      const bus = await connect();
      const seqs = (got: { event: AnyEventEnvelope }[]) =>
        got.map((g) => (g.event.type === 'rollout.started' ? `${g.event.key}#${g.event.payload.sampleIndex}` : '?'));
      await bus.publish(sequencedRolloutStarted('rollout-old', 0));
      const earliest = await collect(bus, groupName('earliest'), [TOPICS.rollouts], { fromBeginning: true });
      const group = groupName('latest');
      const first = await collect(bus, group, [TOPICS.rollouts], { fromBeginning: false });
      await bus.publish(sequencedRolloutStarted('rollout-new', 1));
      expect(seqs(await first.inbox.waitFor(1))).toEqual(['rollout-new#1']);
      await first.sub.stop();
      // Published while the group has no member, on partitions the first member never handled
      // a message on: its start position must already be on record for the group.
      const later = Array.from({ length: 6 }, (_, i) => sequencedRolloutStarted(`rollout-later-${i}`, 2));
      await bus.publish(later);
      const second = await collect(await connect(), group, [TOPICS.rollouts], { fromBeginning: false });
      const got = await second.inbox.waitFor(later.length);
      expect(new Set(got.map((g) => g.event.id))).toEqual(new Set(later.map((e) => e.id)));
      expect(seqs(await earliest.inbox.waitFor(1))).toEqual(['rollout-old#0']);
    });

    it('redelivers a message to the next member when its consumer dies before committing', async () => {
      const group = groupName('crash');
      const producer = await connect();
      const events = [sequencedRolloutStarted('rollout-crash', 0), sequencedRolloutStarted('rollout-crash', 1)];
      await producer.publish(events);

      const doomed = await connect();
      const seenByDoomed: string[] = [];
      const started = deferred<void>();
      const sub = await doomed.subscribe({
        ...fast,
        group,
        topics: [TOPICS.rollouts],
        handler: async (event) => {
          seenByDoomed.push(event.id); // partial work, then the process "dies" mid-handler
          started.resolve();
          await new Promise<never>(() => undefined);
        },
      });
      await started.promise;
      await sub.stop({ timeoutMs: 0 });
      expect(seenByDoomed).toEqual([events[0].id]);

      const survivor = await connect();
      const { inbox, sub: next } = await collect(survivor, group, [TOPICS.rollouts]);
      const got = await inbox.waitFor(2);
      expect(got.map((g) => g.event.id)).toEqual(events.map((e) => e.id));
      expect(got[0].meta.attempt).toBe(1);
      await next.whenIdle({ timeoutMs: waitMs });
    });

    it('stops gracefully: finishes the in-flight handler, commits it, leaves the rest to the next member', async () => {
      const group = groupName('graceful');
      const producer = await connect();
      const events = Array.from({ length: 6 }, (_, i) => sequencedRolloutStarted('rollout-graceful', i));
      await producer.publish(events);

      const first = await connect();
      const handled: number[] = [];
      const inThird = deferred<void>();
      const sub = await first.subscribe({
        ...fast,
        group,
        topics: [TOPICS.rollouts],
        handler: async (event) => {
          if (event.type !== 'rollout.started') return;
          if (event.payload.sampleIndex === 2) {
            inThird.resolve();
            await delay(300); // stop() arrives while this runs
          }
          handled.push(event.payload.sampleIndex);
        },
      });
      await inThird.promise;
      await sub.stop();
      expect(handled).toEqual([0, 1, 2]);

      // A marker published after the stop: anything redelivered would arrive before it.
      const marker = sequencedRolloutStarted('rollout-graceful', 99);
      await producer.publish(marker);
      const second = await connect();
      const { inbox } = await collect(second, group, [TOPICS.rollouts]);
      const got = await inbox.waitFor(4);
      expect(got.map((g) => (g.event.type === 'rollout.started' ? g.event.payload.sampleIndex : -1))).toEqual([3, 4, 5, 99]);
    });

    it('dead-letters poison messages with their reason and keeps consuming the partition', async () => {
      const group = groupName('poison');
      const bus = await connect();
      const { inbox } = await collect(bus, group, [TOPICS.rollouts]);
      const key = 'rollout-poison';
      const valid = sequencedRolloutStarted(key, 0);
      const poison: [string, Buffer][] = [
        ['malformed_frame', Buffer.from('definitely not an ANV1 frame')],
        ['unknown_version', encodeFrame({ ...valid, version: 99 })],
        ['unknown_type', encodeFrame({ ...valid, type: 'rollout.exploded' })],
        ['invalid_payload', encodeFrame({ ...valid, payload: { ...valid.payload, groupSize: -1 } })],
      ];
      for (const [, value] of poison) await bus.publishRaw(TOPICS.rollouts, { key, value, headers: { 'x-test': 'poison' } });
      const good = sequencedRolloutStarted(key, 1);
      await bus.publish(good);

      const [handled] = await inbox.waitFor(1);
      expect(handled.event.id).toBe(good.id);
      const dead = await (await readDeadLetters(bus, TOPICS.rollouts, group)).waitFor(poison.length);
      expect(dead.map((d) => d.record.headers[HEADERS.reason])).toEqual(poison.map(([reason]) => reason));
      for (const [i, d] of dead.entries()) {
        expect(d.record.value?.equals(poison[i][1])).toBe(true);
        expect(d.record.key).toBe(key);
        expect(d.record.headers[HEADERS.originalTopic]).toBe(TOPICS.rollouts);
        expect(d.record.headers[HEADERS.originalPartition]).toBe(String(handled.meta.partition));
        expect(BigInt(d.record.headers[HEADERS.originalOffset])).toBeLessThan(BigInt(handled.meta.offset));
        expect(d.record.headers[HEADERS.group]).toBe(group);
        expect(d.record.headers[HEADERS.attempts]).toBe('0');
        expect(d.record.headers[HEADERS.error]).toMatch(new RegExp(`^${poison[i][0]}: `));
        expect(d.record.headers['x-test']).toBe('poison');
      }
      expect(new Set(dead.map((d) => d.record.headers[HEADERS.originalOffset])).size).toBe(poison.length);
      expect(inbox.items).toHaveLength(1);
    });

    it('retries a failing handler (in process, then via the retry topic) and handles the message once', async () => {
      const group = groupName('flaky');
      const bus = await connect();
      const attempts: MessageMeta[] = [];
      let successes = 0;
      const sub = await bus.subscribe({
        ...fast,
        group,
        topics: [TOPICS.rollouts],
        maxAttempts: 2,
        retryRounds: 1,
        handler: async (_event, meta) => {
          attempts.push(meta);
          if (attempts.length <= 2) throw new Error(`flaky failure ${meta.attempt}`);
          successes++;
        },
      });
      const event = sequencedRolloutStarted('rollout-flaky', 0);
      await bus.publish(event);
      await waitUntil(() => successes === 1, waitMs, 'the third attempt to succeed');
      await sub.whenIdle({ timeoutMs: waitMs });
      expect(attempts.map((m) => m.attempt)).toEqual([1, 2, 3]);
      expect(attempts[0].deliveredFrom.topic).toBe(TOPICS.rollouts);
      // Attempt 3 came from the group's retry topic but reports where the event was published.
      expect(attempts[2].deliveredFrom.topic).toBe(retryTopicOf(TOPICS.rollouts, group));
      expect([attempts[2].topic, attempts[2].partition, attempts[2].offset]).toEqual([
        attempts[0].topic,
        attempts[0].partition,
        attempts[0].offset,
      ]);
      expect(attempts[2].headers[HEADERS.attempts]).toBe('2');
      expect(attempts[2].headers[HEADERS.error]).toBe('flaky failure 2');
      expect(successes).toBe(1);
      const lag = await sub.lag();
      expect(lag.some((p) => p.topic === retryTopicOf(TOPICS.rollouts, group))).toBe(true);
      expect(lag.every((p) => p.lag === 0)).toBe(true);
    });

    it('dead-letters a message whose handler always fails, with the error in its headers, and keeps consuming', async () => {
      const group = groupName('broken');
      const bus = await connect();
      const key = 'rollout-broken';
      const bad = sequencedRolloutStarted(key, 0);
      const good = sequencedRolloutStarted(key, 1);
      const badAttempts: number[] = [];
      const handled: string[] = [];
      await bus.subscribe({
        ...fast,
        group,
        topics: [TOPICS.rollouts],
        maxAttempts: 2,
        retryRounds: 1,
        handler: async (event, meta) => {
          if (event.id === bad.id) {
            badAttempts.push(meta.attempt);
            throw new Error(`always broken (attempt ${meta.attempt})`);
          }
          handled.push(event.id);
        },
      });
      await bus.publish([bad, good]);
      const [dead] = await (await readDeadLetters(bus, TOPICS.rollouts, group)).waitFor(1);
      expect(handled).toEqual([good.id]);
      expect(badAttempts).toEqual([1, 2, 3, 4]);
      const h = dead.record.headers;
      expect(h[HEADERS.reason]).toBe('handler_failed');
      expect(h[HEADERS.error]).toBe('always broken (attempt 4)');
      expect(h[HEADERS.attempts]).toBe('4');
      expect(h[HEADERS.group]).toBe(group);
      expect(h[HEADERS.originalTopic]).toBe(TOPICS.rollouts);
      expect(h[HEADERS.eventId]).toBe(bad.id);
      expect(h[HEADERS.retryRound]).toBeUndefined();
      expect(dead.record.key).toBe(key);
    });

    it('rejects an invalid or oversized event at publish and sends nothing of that batch', async () => {
      const bus = await connect();
      const { inbox } = await collect(bus, groupName('invalid'), [TOPICS.rollouts, TOPICS.llmCalls]);
      const ok = sequencedRolloutStarted('rollout-invalid', 0);
      const invalid = sequencedRolloutStarted('rollout-invalid', 1) as EventEnvelope;
      (invalid.payload as { groupSize: number }).groupSize = 0;
      await expect(bus.publish([ok, invalid])).rejects.toSatisfy((e) => e instanceof ContractError && e.reason === 'invalid_payload');
      const huge = sampleLlmCallEvent({ promptTokens: 3_200_000, outputTokens: 1, seed: 1 });
      await expect(bus.publish([ok, huge])).rejects.toSatisfy((e) => e instanceof ContractError && e.reason === 'oversized');

      const marker = sequencedRolloutStarted('rollout-invalid', 2);
      await bus.publish(marker);
      const [first] = await inbox.waitFor(1);
      expect(first.event.id).toBe(marker.id);
    });

    it('carries W3C trace context from the publisher into the handler', async () => {
      const bus = await connect();
      const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
      const parentSpanId = '00f067aa0ba902b7';
      const seen = new Inbox<{ traceparent: string | undefined; traceId: string | undefined }>(waitMs);
      await bus.subscribe({
        ...fast,
        group: groupName('trace'),
        topics: [TOPICS.rollouts],
        handler: async (_event, meta) =>
          seen.push({ traceparent: meta.headers.traceparent, traceId: trace.getActiveSpan()?.spanContext().traceId }),
      });
      await withRemoteParent(traceId, parentSpanId, () => bus.publish(sequencedRolloutStarted('rollout-traced', 0)));
      const [got] = await seen.waitFor(1);
      expect(got.traceparent).toBe(`00-${traceId}-${parentSpanId}-01`);
      expect(got.traceId).toBe(traceId);
    });

    it('keeps the trace each event was bound to when events of several traces are published together', async () => {
      const bus = await connect();
      const seen = new Inbox<{ rollout: string; traceparent: string | undefined }>(waitMs);
      await bus.subscribe({
        ...fast,
        group: groupName('trace-bound'),
        topics: [TOPICS.rollouts],
        handler: async (event, meta) =>
          seen.push({ rollout: (event.payload as { rolloutId: string }).rolloutId, traceparent: meta.headers.traceparent }),
      });
      const a = withRemoteParent('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', '1111111111111111', () =>
        bindTraceContext(sequencedRolloutStarted('rollout-bound-a', 0)),
      );
      const b = withRemoteParent('bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', '2222222222222222', () =>
        bindTraceContext(sequencedRolloutStarted('rollout-bound-b', 0)),
      );
      // Published from a third trace: each event still carries its own.
      await withRemoteParent('cccccccccccccccccccccccccccccccc', '3333333333333333', () => bus.publish([a, b]));
      const got = await seen.waitFor(2);
      const byRollout = Object.fromEntries(got.map((g) => [g.rollout, g.traceparent]));
      expect(byRollout['rollout-bound-a']).toBe('00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-1111111111111111-01');
      expect(byRollout['rollout-bound-b']).toBe('00-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-2222222222222222-01');
    });

    const seqOf = (e: AnyEventEnvelope) => (e.type === 'rollout.started' ? e.payload.sampleIndex : -1);

    it('batch handler: ordered runs reach it (not one call per message) and poison messages are dead-lettered between them', async () => {
      const bus = await connect();
      const group = groupName('batch-runs');
      const dead = await readDeadLetters(bus, TOPICS.rollouts, group);
      const batched: number[][] = [];
      const single: number[] = [];
      // published before the subscription: the log holds runs to hand over at once
      const events = Array.from({ length: 40 }, (_, i) => sequencedRolloutStarted('batch-key-1', i));
      await bus.publish(events.slice(0, 20));
      await bus.publishRaw(TOPICS.rollouts, { key: 'batch-key-1', value: Buffer.from('not a frame') });
      await bus.publish(events.slice(20));
      const sub = await bus.subscribe({
        ...fast,
        group,
        topics: [TOPICS.rollouts],
        handler: async (e) => void single.push(seqOf(e)),
        batchHandler: async (items) => void batched.push(items.map((i) => seqOf(i.event))),
      });
      await waitUntil(() => batched.flat().length + single.length >= 40, waitMs, 'all 40 handled');
      const [d] = await dead.waitFor(1);
      await sub.whenIdle({ timeoutMs: waitMs });
      expect(single).toEqual([]);
      expect(batched.flat()).toEqual(events.map((_, i) => i));
      expect(batched.length).toBeLessThan(40);
      expect(d.record.headers[HEADERS.reason]).toBe('malformed_frame');
    });

    it('batch handler: a failing batch falls back to the per-message handler, retrying and dead-lettering only the bad event', async () => {
      const bus = await connect();
      const group = groupName('batch-fallback');
      const dead = await readDeadLetters(bus, TOPICS.rollouts, group);
      const handled: number[] = [];
      let batchCalls = 0;
      await bus.publish(Array.from({ length: 15 }, (_, i) => sequencedRolloutStarted('batch-key-2', i)));
      const sub = await bus.subscribe({
        ...fast,
        group,
        topics: [TOPICS.rollouts],
        maxAttempts: 2,
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
      await waitUntil(() => handled.length >= 14, waitMs, '14 good events handled');
      const [d] = await dead.waitFor(1);
      await sub.whenIdle({ timeoutMs: waitMs });
      expect(batchCalls).toBeGreaterThan(0);
      expect([...handled].sort((a, b) => a - b)).toEqual(Array.from({ length: 15 }, (_, i) => i).filter((i) => i !== 7));
      expect(d.record.headers[HEADERS.reason]).toBe('handler_failed');
    });
  });
}

/** Collects deliveries; waits poll, so they work the same for both buses. */
export class Inbox<T> {
  readonly items: T[] = [];

  constructor(private readonly waitMs: number) {}

  push(item: T): void {
    this.items.push(item);
  }

  async waitFor(count: number): Promise<T[]> {
    await waitUntil(
      () => this.items.length >= count,
      this.waitMs,
      () => `${count} deliveries (got ${this.items.length})`,
    );
    return this.items.slice(0, count);
  }
}

export async function waitUntil(condition: () => boolean, timeoutMs: number, what: string | (() => string)): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`);
    await delay(10);
  }
}

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function deferred<T>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}
