import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataSource } from 'typeorm';
import { TOPICS, createEvent, type AnyEventEnvelope, type EventEnvelope } from '@anvil/contracts';
import { MemoryBroker, MemoryBus, silentLogger, type MessageBus } from '@anvil/messaging';
import { createDataSource } from '../data-source';
import { ProcessedEvent } from '../entities/processed-event.entity';
import { runMigrations } from '../migrate';
import { Outbox } from './outbox';

/** A weights.published event for version `v` (the trainer's use of the outbox). */
function published(v: number, key = 'run'): EventEnvelope<'weights.published'> {
  return createEvent(
    'weights.published',
    {
      version: v,
      parentVersion: v - 1,
      step: v,
      checkpointId: `ckpt-${randomUUID()}`,
      checkpointUri: `file:///ckpt/${v}`,
      format: 'hf-safetensors',
      sha256: 'a'.repeat(64),
      publishedAt: Date.now(),
    },
    { key, producer: 'trainer' },
  );
}

const until = async (cond: () => boolean | Promise<boolean>, ms = 10_000) => {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
};

/** The state change the event announces: a row in the same transaction (processed_events is handy). */
const stateRow = (eventId: string) => ({ consumer: 'outbox-spec-state', eventId });

let ds: DataSource;
beforeAll(async () => {
  ds = createDataSource();
  await ds.initialize();
  await runMigrations(ds);
  // PGlite compiles its WebAssembly on first use: slow on a loaded machine.
}, 120_000);
afterAll(async () => {
  await ds?.destroy();
});

describe('Outbox on PGlite and the in-process bus', () => {
  const setup = (producer: string, opts: ConstructorParameters<typeof Outbox>[2] extends infer O ? Partial<O> : never = {}) => {
    const broker = new MemoryBroker();
    const bus = new MemoryBus({ broker, logger: silentLogger });
    const seen: AnyEventEnvelope[] = [];
    const subscribed = bus.subscribe({
      group: `g-${producer}`,
      topics: [TOPICS.weights],
      fromBeginning: true,
      handler: async (e) => void seen.push(e),
    });
    const outbox = new Outbox(ds, bus, { producer, deleteDelayMs: 5, ...opts });
    return { bus, broker, seen, subscribed, outbox };
  };

  it('publishes what a committed transaction enqueued, in commit order, and deletes the rows', async () => {
    const { bus, seen, subscribed, outbox } = setup(`p-${randomUUID()}`);
    await subscribed;
    const events = [1, 2, 3, 4].map((v) => published(v));
    for (const e of events) {
      await outbox.transaction(async (m) => {
        await m.insert(ProcessedEvent, stateRow(e.id));
        await outbox.enqueue(m, e);
      });
    }
    // Two events in one transaction keep their order too.
    const pair = [published(5), published(6)];
    await outbox.transaction((m) => outbox.enqueue(m, pair));
    await until(() => seen.length === 6);
    expect(seen.map((e) => e.id)).toEqual([...events, ...pair].map((e) => e.id));
    await until(async () => (await outbox.pendingRows()) === 0);
    expect(await outbox.stop()).toBe(true);
    await bus.close();
  });

  it('publishes nothing for a transaction that rolled back, and leaves no row', async () => {
    const { bus, seen, subscribed, outbox } = setup(`p-${randomUUID()}`);
    await subscribed;
    const e = published(1);
    await expect(
      outbox.transaction(async (m) => {
        await outbox.enqueue(m, e);
        await m.insert(ProcessedEvent, stateRow(e.id));
        throw new Error('the state change failed');
      }),
    ).rejects.toThrow('the state change failed');
    await new Promise((r) => setTimeout(r, 50));
    expect(seen).toEqual([]);
    expect(await outbox.pendingRows()).toBe(0);
    expect(await ds.manager.countBy(ProcessedEvent, stateRow(e.id))).toBe(0);
    await outbox.stop();
    await bus.close();
  });

  it('refuses to enqueue outside a transaction, and an invalid event rolls its transaction back', async () => {
    const { bus, outbox } = setup(`p-${randomUUID()}`);
    await expect(outbox.enqueue(ds.manager, published(1))).rejects.toThrow(/open transaction/);
    const bad = { ...published(1), payload: { ...published(1).payload, version: -1 } } as EventEnvelope;
    await expect(outbox.transaction((m) => outbox.enqueue(m, bad))).rejects.toThrow(/version/);
    expect(await outbox.pendingRows()).toBe(0);
    await outbox.stop();
    await bus.close();
  });

  it('crash between commit and publish: the next process sweeps each event out once, nothing lost', async () => {
    const producer = `p-${randomUUID()}`;
    const { bus, seen, subscribed } = setup(producer);
    await subscribed;
    // The dying process: commits state + events, never gets to publish (no committed()).
    const dead = new Outbox(ds, { publish: () => new Promise<void>(() => undefined) }, { producer });
    const events = Array.from({ length: 7 }, (_, i) => published(i + 1));
    for (const e of events) {
      await ds.transaction(async (m) => {
        await m.insert(ProcessedEvent, stateRow(e.id));
        await dead.enqueue(m, e);
      });
    }
    expect(await dead.pendingRows()).toBe(7);

    const next = new Outbox(ds, bus, { producer, staleAfterMs: 0, maxBatch: 3 });
    expect(await next.sweep()).toBe(7);
    expect(await next.sweep()).toBe(0);
    await until(() => seen.length === 7);
    expect(seen.map((e) => e.id)).toEqual(events.map((e) => e.id));
    expect(await next.pendingRows()).toBe(0);
    await next.stop();
    await bus.close();
  });

  it('keeps events through a broker outage and publishes them, in order, when it is back', async () => {
    const producer = `p-${randomUUID()}`;
    const { bus, seen, subscribed } = setup(producer);
    await subscribed;
    let down = 3;
    const flaky: Pick<MessageBus, 'publish'> = {
      publish: async (events) => {
        if (down-- > 0) throw new Error('broker unavailable');
        await bus.publish(events);
      },
    };
    const outbox = new Outbox(ds, flaky, { producer, retryMinMs: 5, retryMaxMs: 20, deleteDelayMs: 5 });
    const events = [1, 2, 3].map((v) => published(v));
    for (const e of events) await outbox.transaction((m) => outbox.enqueue(m, e));
    await until(() => seen.length === 3);
    expect(seen.map((e) => e.id)).toEqual(events.map((e) => e.id));
    await until(async () => (await outbox.pendingRows()) === 0);
    expect(await outbox.stop()).toBe(true);
    await bus.close();
  });

  it('a sweeper publishes only its own producer’s rows, and not rows its own relay is still publishing', async () => {
    const mine = `p-${randomUUID()}`;
    const other = `p-${randomUUID()}`;
    const { bus, seen, subscribed } = setup(mine);
    await subscribed;
    const foreign = new Outbox(ds, { publish: () => new Promise<void>(() => undefined) }, { producer: other });
    await ds.transaction((m) => foreign.enqueue(m, published(1)));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const slow: Pick<MessageBus, 'publish'> = { publish: async (events) => (await gate, bus.publish(events)) };
    const outbox = new Outbox(ds, slow, { producer: mine, staleAfterMs: 0 });
    const e = published(2);
    await outbox.transaction((m) => outbox.enqueue(m, e));
    // Its own relay holds e (publish in flight): the sweep leaves it alone, and the other producer's row too.
    expect(await outbox.sweep()).toBe(0);
    release();
    await until(() => seen.length === 1);
    expect(seen.map((x) => x.id)).toEqual([e.id]);
    expect(await foreign.pendingRows()).toBe(1);
    await outbox.stop();
    await new Outbox(ds, bus, { producer: other, staleAfterMs: 0 }).sweep();
    expect(await foreign.pendingRows()).toBe(0);
    await bus.close();
  });
});
