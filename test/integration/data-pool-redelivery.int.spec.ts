import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataSource } from 'typeorm';
import { TOPICS } from '@anvil/contracts';
import { createBus, type MessageBus } from '@anvil/messaging';
import { createDataSource, LlmCall, runMigrations } from '@anvil/persistence';
import { waitFor } from '@anvil/testing';
import { createDatabase } from '@anvil/infra';
import { DataPoolIngestion } from '@anvil/middleware';
import { llmCall, newRolloutIds } from '@anvil/contracts/testing';

/**
 * At-least-once delivery + idempotent writes = exactly one row: a consumer process that is
 * SIGKILLed after persisting an event but before committing its offset leaves the message to
 * the next member of the group, which receives it again and changes nothing.
 */
const brokers = process.env.KAFKA_BROKERS!;
const root = join(__dirname, '..', '..');
let ds: DataSource;
let bus: MessageBus;
let url: string;
const topicPrefix = `redelivery-${Date.now()}.`;
const group = 'it.data-pool';

beforeAll(async () => {
  if (!brokers || !process.env.DATABASE_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');
  url = await createDatabase(`anvil_redelivery_${process.pid}_${Date.now() % 100000}`, {
    port: Number(new URL(process.env.DATABASE_URL).port),
  });
  ds = createDataSource({ url });
  await ds.initialize();
  await runMigrations(ds);
  bus = createBus({ kind: 'kafka', brokers: brokers.split(','), clientId: 'redelivery-test', topicPrefix });
});

afterAll(async () => {
  await bus?.close();
  await ds?.destroy();
});

describe('Data Pool consumer killed before commit', () => {
  it('gets the message again and PostgreSQL still holds one row', async () => {
    const event = llmCall(newRolloutIds());
    await bus.publish(event);

    const child = spawn('npx', ['tsx', 'test/integration/fixtures/crashing-data-pool-consumer.ts', brokers, url, topicPrefix, group], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.once('exit', (code, signal) => resolve({ code, signal })),
    );
    expect(out).toContain(`persisted ${event.id}`);
    expect(exit.signal ?? (exit.code === 137 ? 'SIGKILL' : null), out).toBe('SIGKILL');
    expect(await ds.getRepository(LlmCall).countBy({ id: event.payload.callId })).toBe(1);

    // The next member of the group gets the uncommitted message again.
    const ingestion = new DataPoolIngestion(ds, group);
    const deliveries: { id: string; changed: boolean }[] = [];
    const sub = await bus.subscribe({
      group,
      topics: [TOPICS.llmCalls],
      fromBeginning: true,
      handler: async (e) => {
        deliveries.push({ id: e.id, changed: await ingestion.ingest(e) });
      },
    });
    await waitFor('redelivery', async () => (deliveries.length > 0 ? true : undefined), 90_000);
    await sub.whenIdle({ timeoutMs: 30_000 });
    await sub.stop();

    expect(deliveries).toEqual([{ id: event.id, changed: false }]);
    expect(await ds.getRepository(LlmCall).countBy({ id: event.payload.callId })).toBe(1);
    const stored = await ds.getRepository(LlmCall).findOneByOrFail({ id: event.payload.callId });
    expect(Buffer.from(stored.promptIds.buffer).equals(Buffer.from(event.payload.promptDeltaIds.buffer))).toBe(true);
  });
});
