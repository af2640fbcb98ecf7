import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataSource } from 'typeorm';
import { TOPICS } from '@anvil/contracts';
import { createBus, type MessageBus } from '@anvil/messaging';
import { createDataSource, Outbox, ProcessedEvent, ProcessedEventStore, runMigrations } from '@anvil/persistence';
import { createScratchDatabase, type ScratchDatabase, waitFor } from '@anvil/testing';

/**
 * The generic transactional outbox on real Kafka and PostgreSQL: a producer process is
 * SIGKILLed between committing its state changes (with their events) and publishing them, or
 * after publishing but before deleting the rows; a fresh process's sweeper publishes what was
 * left. Every committed state change is announced, none twice in the first case, and the
 * consumer's effect happens exactly once in both (idempotent by event id).
 */
const brokers = process.env.KAFKA_BROKERS;
const serverUrl = process.env.DATABASE_URL;
const root = join(__dirname, '..', '..');
const topicPrefix = `outbox-${Date.now()}.`;
let db: ScratchDatabase;
let ds: DataSource;
let bus: MessageBus;

beforeAll(async () => {
  if (!brokers || !serverUrl) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
  db = await createScratchDatabase(serverUrl, 'anvil_outbox');
  ds = createDataSource({ url: db.url });
  await ds.initialize();
  await runMigrations(ds);
  bus = createBus({ kind: 'kafka', brokers: brokers.split(','), clientId: 'outbox-it', topicPrefix });
});

afterAll(async () => {
  await bus?.close();
  await ds?.destroy();
  await db?.drop();
});

async function crashWriter(
  producer: string,
  mode: 'before-publish' | 'before-delete',
  count: number,
): Promise<{ ids: string[]; out: string }> {
  const child = spawn(
    'npx',
    ['tsx', 'test/integration/fixtures/outbox-crash-writer.ts', brokers!, db.url, topicPrefix, producer, mode, String(count)],
    {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  expect(exit.signal ?? (exit.code === 137 ? 'SIGKILL' : null), out).toBe('SIGKILL');
  const line = out.split('\n').find((l) => l.startsWith('['));
  expect(line, out).toBeDefined();
  return { ids: JSON.parse(line!) as string[], out };
}

/** A consumer whose effect (a processed_events row of its own) is idempotent by event id. */
async function consume(producer: string) {
  const processed = new ProcessedEventStore(ds);
  const deliveries: string[] = [];
  const sub = await bus.subscribe({
    group: `it.outbox.${producer}`,
    topics: [TOPICS.weights],
    fromBeginning: true,
    handler: async (e) => {
      if (e.type !== 'weights.published' || e.key !== producer) return;
      deliveries.push(e.id);
      await processed.withEventOnce(`effect:${producer}`, e.id, async () => undefined);
    },
  });
  return { sub, deliveries };
}

const count = (consumer: string) => ds.manager.countBy(ProcessedEvent, { consumer });

describe('generic outbox on Kafka + PostgreSQL, producer killed', () => {
  it('between commit and publish: the next process publishes every committed event once, in commit order', async () => {
    const producer = `trainer-${randomUUID().slice(0, 8)}`;
    const { ids } = await crashWriter(producer, 'before-publish', 6);
    expect(ids).toHaveLength(6);
    expect(await count(`state:${producer}`)).toBe(6);
    const { sub, deliveries } = await consume(producer);
    // Nothing was published by the dead process.
    await new Promise((r) => setTimeout(r, 1_000));
    expect(deliveries).toEqual([]);

    const next = new Outbox(ds, bus, { producer, staleAfterMs: 0, sweepIntervalMs: 200 });
    expect(await next.pendingRows()).toBe(6);
    next.start();
    await waitFor('swept events', async () => (deliveries.length >= 6 ? true : undefined), 60_000);
    await waitFor('rows deleted', async () => ((await next.pendingRows()) === 0 ? true : undefined), 30_000);
    await new Promise((r) => setTimeout(r, 1_500)); // a second sweep has run: it must publish nothing more
    await sub.whenIdle({ timeoutMs: 30_000 });
    await sub.stop();
    expect(await next.stop()).toBe(true);

    expect(deliveries).toEqual(ids);
    expect(await count(`effect:${producer}`)).toBe(6);
  });

  it('after publish, before delete: the sweep republishes, the idempotent consumer applies each event once', async () => {
    const producer = `trainer-${randomUUID().slice(0, 8)}`;
    const { ids, out } = await crashWriter(producer, 'before-delete', 4);
    expect(out).toContain('published true');
    const next = new Outbox(ds, bus, { producer, staleAfterMs: 0, sweepIntervalMs: 200 });
    expect(await next.pendingRows()).toBe(4);
    const { sub, deliveries } = await consume(producer);
    next.start();
    await waitFor('republished events', async () => (deliveries.length >= 8 ? true : undefined), 60_000);
    await waitFor('rows deleted', async () => ((await next.pendingRows()) === 0 ? true : undefined), 30_000);
    await sub.whenIdle({ timeoutMs: 30_000 });
    await sub.stop();
    expect(await next.stop()).toBe(true);

    expect(deliveries).toEqual([...ids, ...ids]);
    expect(await count(`effect:${producer}`)).toBe(4);
    expect(await count(`state:${producer}`)).toBe(4);
  });
});
