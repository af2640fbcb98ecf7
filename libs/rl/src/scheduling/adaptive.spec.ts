import { describe, expect, it } from 'vitest';
import { seededRandom } from '../random';
import { AdaptiveWindow, adaptiveWindowConfig, SchedulingError, WindowedFifo } from './index';

/** A controller that has seen a population of difficulties uniform over 1..4. */
function controller(input: Parameters<typeof adaptiveWindowConfig>[1] = {}, N = 40) {
  const a = new AdaptiveWindow(adaptiveWindowConfig(N, input));
  const rnd = seededRandom(3);
  for (let i = 0; i < 400; i++) a.observe(1 + Math.floor(rnd() * 4));
  return a;
}

/** A batch that is a random sample of the population. */
function randomBatch(rnd: () => number, n = 16) {
  return Array.from({ length: n }, () => 1 + Math.floor(rnd() * 4));
}

describe('adaptive W: the rule', () => {
  it('defaults and bounds: min = round(0.1N), max = N, start = round(0.3N)', () => {
    const c = adaptiveWindowConfig(40);
    expect([c.min, c.max, c.initial]).toEqual([4, 40, 12]);
    expect(adaptiveWindowConfig(3).min).toBe(1);
    expect(new WindowedFifo({ inFlight: 40, window: 'adaptive' }).window).toBe(12);
  });

  it('widens when the trainer waits, never above max', () => {
    const a = controller({ initial: 6, max: 20, relaxAfter: 0 });
    const rnd = seededRandom(1);
    a.step(0, randomBatch(rnd));
    const seen: number[] = [];
    for (let t = 1; t <= 12; t++) {
      a.waited(50); // half of each 100-unit step spent waiting
      seen.push(a.step(t * 100, randomBatch(rnd)));
    }
    expect(seen[0]).toBeGreaterThan(6);
    expect(seen.every((w, i) => i === 0 || w >= seen[i - 1])).toBe(true);
    expect(Math.max(...seen)).toBe(20);
  });

  it('narrows when batches are easier than the population, never below min', () => {
    const a = controller({ initial: 30, min: 3, relaxAfter: 0 });
    a.step(0, [1, 1, 1, 1]);
    const seen: number[] = [];
    for (let t = 1; t <= 40; t++) {
      a.waited(50); // even while the trainer waits: the mix wins
      seen.push(a.step(t * 100, Array(16).fill(1)));
    }
    expect(a.drift).toBeLessThan(-0.15);
    expect(Math.min(...seen)).toBe(3);
    expect(seen[seen.length - 1]).toBe(3);
  });

  it('narrows when batch mixes swing more than random sampling explains (no net bias)', () => {
    const a = controller({ initial: 30, min: 3, relaxAfter: 0, driftTolerance: 10 });
    a.step(0, Array(16).fill(2));
    for (let t = 1; t <= 40; t++) {
      a.waited(50);
      a.step(t * 100, Array(16).fill(t % 2 === 0 ? 1 : 4)); // all easy, then all hard
    }
    expect(Math.abs(a.drift)).toBeLessThan(0.3);
    expect(a.dispersion).toBeGreaterThan(1.25);
    expect(a.window).toBe(3);
  });

  it('random batches with a waiting trainer: noise does not hold the window down', () => {
    const a = controller({ initial: 4, relaxAfter: 0 });
    const rnd = seededRandom(11);
    a.step(0, randomBatch(rnd));
    const ws: number[] = [];
    for (let t = 1; t <= 400; t++) {
      a.waited(30);
      ws.push(a.step(t * 100, randomBatch(rnd)));
    }
    const late = ws.slice(100);
    expect(late.reduce((x, y) => x + y, 0) / late.length).toBeGreaterThan(0.75 * 40);
    expect(a.dispersion).toBeGreaterThan(0.5);
    expect(a.dispersion).toBeLessThan(1.5);
  });

  it('gives width back when the trainer has not waited for relaxAfter steps', () => {
    const a = controller({ initial: 10, min: 4, relaxAfter: 3 });
    const rnd = seededRandom(5);
    const ws = [a.step(0, randomBatch(rnd))];
    for (let t = 1; t <= 30; t++) ws.push(a.step(t * 100, randomBatch(rnd)));
    expect(ws[2]).toBe(9);
    expect(ws[ws.length - 1]).toBe(4);
  });

  it('within one wait, widens one notch per patience x usual step interval, then resets to the base', () => {
    const a = controller({ initial: 8, relaxAfter: 0, patience: 0.1, widenFactor: 1.5, idleTolerance: 0.5 });
    const rnd = seededRandom(9);
    for (let t = 0; t <= 5; t++) a.step(t * 100, randomBatch(rnd)); // usual interval 100
    expect(a.window).toBe(8);
    a.waited(5);
    expect(a.window).toBe(8); // half a patience period
    a.waited(5);
    expect(a.window).toBe(12); // one notch
    a.waited(10);
    expect(a.window).toBe(18);
    a.waited(1000);
    expect(a.window).toBe(40); // capped at max
    // the take ends the wait: back to the base, which itself widens (idle 1020/1120 > 0.5)
    expect(a.step(620 + 1000, randomBatch(rnd))).toBe(12);
  });

  it('WindowedFifo feeds it: waits widen, difficulty comes from the attribute or the completion time', () => {
    const f = new WindowedFifo({ inFlight: 20, window: 'adaptive', adaptive: { initial: 2, min: 1, relaxAfter: 0 } });
    let pos = 0;
    const sub = (d?: number) => f.submit({ id: `e${pos}`, position: pos++, submittedAt: 0, ...(d === undefined ? {} : { difficulty: d }) });
    for (let i = 0; i < 20; i++) sub((i % 4) + 1);
    let now = 0;
    for (let step = 0; step < 6; step++) {
      const head = f.head as number;
      f.complete(`e${head}`, { tokens: 1, completedAt: now });
      f.complete(`e${head + 1}`, { tokens: 1, completedAt: now });
      f.trainerWaited(40);
      now += 100;
      expect(f.take({ now, maxItems: 2 })).toHaveLength(2);
      sub((pos % 4) + 1);
      sub((pos % 4) + 1);
    }
    expect(f.window).toBeGreaterThan(2);
    // without attributes the controller measures completion times
    const g = new WindowedFifo({ inFlight: 4, window: 'adaptive' });
    g.submit({ id: 'a', position: 0, submittedAt: 0 });
    g.complete('a', { tokens: 1, completedAt: 1000 });
    expect(g.take({ now: 1000 })).toHaveLength(1);
    expect(g.drift).not.toBeNull();
    expect(new WindowedFifo({ inFlight: 4, window: 2 }).drift).toBeNull();
  });

  it('snapshot/restore keeps the controller state; bad knobs and state name the field', () => {
    const a = controller({ initial: 7 });
    a.step(0, [1, 2, 3, 4]);
    a.waited(10);
    const b = new AdaptiveWindow(a.cfg, a.snapshot());
    expect(b.snapshot()).toEqual(a.snapshot());
    const bad = (input: object, field: string) => {
      try {
        adaptiveWindowConfig(10, input);
      } catch (e) {
        expect(e).toBeInstanceOf(SchedulingError);
        expect((e as SchedulingError).field).toBe(field);
        return;
      }
      throw new Error(`expected an error on ${field}`);
    };
    bad({ min: 0 }, 'adaptive.min');
    bad({ max: 11 }, 'adaptive.max');
    bad({ initial: 11 }, 'adaptive.initial');
    bad({ idleTolerance: 1 }, 'adaptive.idleTolerance');
    bad({ widenFactor: 0.5 }, 'adaptive.widenFactor');
    bad({ narrowFactor: 0 }, 'adaptive.narrowFactor');
    bad({ driftTolerance: -1 }, 'adaptive.driftTolerance');
    bad({ driftHalfLife: 0 }, 'adaptive.driftHalfLife');
    bad({ dispersionTolerance: NaN }, 'adaptive.dispersionTolerance');
    bad({ relaxAfter: 1.5 }, 'adaptive.relaxAfter');
    bad({ populationMemory: 0 }, 'adaptive.populationMemory');
    bad({ patience: -1 }, 'adaptive.patience');
    expect(() => new AdaptiveWindow(a.cfg, { ...a.snapshot(), w: 1000 })).toThrow(/adaptive\.w/);
    expect(() => new AdaptiveWindow(a.cfg, { ...a.snapshot(), popVar: -1 })).toThrow(/adaptive\.popVar/);
  });
});
