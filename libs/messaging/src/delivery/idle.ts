import type { PartitionLag } from '../bus';
import { sleep } from './signals';

/** Polls `lag` until every partition is committed to its end (shared by both buses' whenIdle). */
export async function waitUntilIdle(
  lag: () => Promise<PartitionLag[]>,
  options: { timeoutMs?: number; pollMs?: number } = {},
  signal: AbortSignal = new AbortController().signal,
): Promise<void> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  const pollMs = options.pollMs ?? 100;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const partitions = await lag();
    const pending = partitions.filter((p) => p.lag > 0);
    if (pending.length === 0) return;
    if (Date.now() >= deadline) {
      const summary = pending.map((p) => `${p.topic}[${p.partition}]=${p.lag}`).join(', ');
      throw new Error(`not idle after ${timeoutMs} ms: ${summary}`);
    }
    if (!(await sleep(pollMs, signal))) throw new Error('subscription stopped while waiting for it to become idle');
  }
}
