import { describe, expect, it } from 'vitest';
import { seededRandom, WindowedFifo, type WindowConfig, type WindowedFifoState } from '@anvil/rl';
import { fifoReach } from './scheduling/fifo-view';

type Entry = WindowedFifoState['entries'][number];

/** A queue as the Data Pool reads it: from the first pending or completed entry on, taken and dropped ones in between. */
function randomQueue(rand: () => number, length: number): Entry[] {
  const statuses = ['pending', 'completed', 'taken', 'dropped'] as const;
  return Array.from({ length }, (_, i) => {
    const status = i === 0 ? (rand() < 0.5 ? 'pending' : 'completed') : statuses[Math.floor(rand() * (rand() < 0.5 ? 2 : 4))];
    const e: Entry = { id: `r${i}`, position: i * 2 + (rand() < 0.3 ? 1 : 0), submittedAt: 1000 + i, status };
    if (status === 'completed' || status === 'taken')
      Object.assign(e, { tokens: 1 + Math.floor(rand() * 500), completedAt: 5000 + Math.floor(rand() * 1000) });
    return e;
  });
}

/** What the Data Pool's query keeps: entries before the (reach + 1)-th pending or completed one. */
function truncate(entries: Entry[], reach: number): Entry[] {
  let seen = 0;
  const out: Entry[] = [];
  for (const e of entries) {
    if (e.status === 'pending' || e.status === 'completed') seen++;
    if (seen > reach) break;
    out.push(e);
  }
  return out;
}

describe('fifoReach: reading the queue only as far as one take can reach changes no take', () => {
  it('count mode: batchTrajectories + N; token mode: everything', () => {
    expect(fifoReach({ batchTrajectories: 8, window: { inFlight: 64 } })).toBe(72);
    expect(fifoReach({ window: { inFlight: 64 } })).toBeNull();
  });

  it('same batch (ids, out-of-order distances) and same expired head from the whole queue and from its reach, fixed and adaptive W, over random queues', () => {
    const rand = seededRandom(13);
    let compared = 0;
    let truncated = 0;
    for (let trial = 0; trial < 3000; trial++) {
      const inFlight = 1 + Math.floor(rand() * 12);
      const batchTrajectories = 1 + Math.floor(rand() * 6);
      const window: WindowConfig =
        rand() < 0.3
          ? { inFlight, window: 'adaptive', headAgeLimitMs: 2_000 }
          : { inFlight, window: 1 + Math.floor(rand() * inFlight), headAgeLimitMs: 2_000 };
      const entries = randomQueue(rand, Math.floor(rand() * 60) + 1);
      const reach = fifoReach({ batchTrajectories, window });
      if (reach === null) throw new Error('count mode has a reach');
      const part = truncate(entries, reach);
      if (part.length < entries.length) truncated++;
      const take = (es: Entry[]) => {
        const f = WindowedFifo.restore(window, { entries: es, passedPosition: null });
        if (window.window === 'adaptive') f.trainerWaited(10_000); // lets the adaptive window widen at once
        const head = f.expiredHead(10_000);
        const taken = f.take({ now: 10_000, maxItems: batchTrajectories, minItems: batchTrajectories }).map((t) => [t.id, t.outOfOrder]);
        return { head: head?.id ?? null, taken };
      };
      const whole = take(entries);
      const cut = take(part);
      expect(cut.taken, `trial ${trial}`).toEqual(whole.taken);
      // a pending entry beyond the reach is behind at least `reach` completed ones: checked once within reach
      if (whole.head === null || part.some((e) => e.id === whole.head)) expect(cut.head, `trial ${trial}`).toBe(whole.head);
      compared++;
    }
    expect(compared).toBe(3000);
    expect(truncated).toBeGreaterThan(500); // the cut really cut
  });
});
