import type { DataSource } from 'typeorm';
import type { AnyEventEnvelope } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import { DataPoolRuntime } from '../../runtime';
import type { DataPoolConfigInput } from '../config';
import { uid } from './pool-events';

/** What the Data Pool suites run on: the in-process bus + PGlite (unit) or Kafka + PostgreSQL (integration). */
export interface PoolEnv {
  ds: () => DataSource;
  bus: () => MessageBus;
  /** Resolves once the runtime's consumer group has handled everything published so far. */
  drain: (rt: DataPoolRuntime) => Promise<void>;
}

export async function collect(bus: MessageBus, topic: string, group: string) {
  const seen: AnyEventEnvelope[] = [];
  const sub = await bus.subscribe({ group, topics: [topic], fromBeginning: true, handler: async (e) => void seen.push(e) });
  return { seen, stop: () => sub.stop() };
}

export async function until<T>(
  what: string,
  f: () => Promise<T | null | undefined | false> | T | null | undefined | false,
  timeoutMs = 60_000,
): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const v = await f();
    if (v) return v as T;
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Runtimes a test started and has not stopped (a failed test stops nowhere; see stopLeftovers). */
const live = new Set<DataPoolRuntime>();

/**
 * afterEach: stops the runtimes a failed test left running. Left alone they keep consuming the
 * shared topics and settle the next tests' groups under their own runs and filters.
 */
export async function stopLeftovers(): Promise<void> {
  for (const rt of [...live]) await rt.stop(1_000);
}

/** A runtime of its own run and consumer group (`group` to know it, e.g. to read its dead-letter topic). */
export function runtime(env: PoolEnv, config: DataPoolConfigInput, group = uid('dp')) {
  const runId = uid('run');
  const rt = new DataPoolRuntime({
    bus: env.bus(),
    dataSource: env.ds(),
    group,
    config: { runId, ...config },
    tickIntervalMs: 100,
    pruneIntervalMs: 0,
    outbox: { staleAfterMs: 1_000, sweepIntervalMs: 500 },
  });
  live.add(rt);
  const stop = rt.stop.bind(rt);
  rt.stop = (timeoutMs?: number) => (live.delete(rt), stop(timeoutMs));
  return rt;
}
