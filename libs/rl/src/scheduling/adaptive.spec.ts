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
  it('defaults and bounds: min = round(0.1N), max = N, base starts at round(0.2N)', () => {
    const c = adaptiveWindowConfig(40);
    expect([c.min, c.max, c.initial, c.mixGate, c.patience]).toEqual([4, 40, 8, 1, 0.25]);
    expect(adaptiveWindowConfig(3).min).toBe(1);
    expect(new WindowedFifo({ inFlight: 40, window: 'adaptive' }).window).toBe(8);
  });

  it('mix gate: admits a batch whose mean is within mixGate standard errors of the population mean, nothing else', () => {
    const a = controller({ mixGate: 1 }); // population uniform over 1..4: mean ≈ 2.5, sd ≈ 1.12
    const snap = a.snapshot();
    const se = Math.sqrt(snap.popVar) / Math.sqrt(16);
    const batch = (mean: number) => Array(16).fill(mean);
    expect(a.admitsWider(batch(snap.popMean))).toBe(true);
    expect(a.admitsWider(batch(snap.popMean + 0.9 * se))).toBe(true);
    expect(a.admitsWider(batch(snap.popMean - 0.9 * se))).toBe(true);
    expect(a.admitsWider(batch(snap.popMean + 1.1 * se))).toBe(false);
    expect(a.admitsWider(Array(16).fill(1))).toBe(false); // all easy
    expect(a.admitsWider([1, 2, 3, 4])).toBe(true);
    // off, or no population yet: never widens at once
    expect(controller({ mixGate: 0 }).admitsWider(batch(snap.popMean))).toBe(false);
    expect(new AdaptiveWindow(adaptiveWindowConfig(40)).admitsWider([2, 3])).toBe(false);
    // widenTo widens the take at hand only, within max; the next step goes back to the base
    a.widenTo(100);
    expect(a.window).toBe(40);
    a.step(0, [1, 2, 3, 4]);
    expect(a.window).toBe(a.base);
  });

  it('narrows the base when batches are easier than the population, never below min', () => {
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

  it('narrows the base when batch mixes swing more than random sampling explains (no net bias)', () => {
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

  it('random batches: sampling noise alone does not narrow the base', () => {
    const a = controller({ initial: 12 });
    const rnd = seededRandom(11);
    const ws: number[] = [];
    for (let t = 0; t <= 400; t++) ws.push(a.step(t * 100, randomBatch(rnd)));
    const late = ws.slice(100);
    expect(late.filter((w) => w === 12).length).toBeGreaterThan(0.9 * late.length);
    expect(a.dispersion).toBeGreaterThan(0.5);
    expect(a.dispersion).toBeLessThan(1.5);
  });

  it('after narrowing, the base recovers one step toward initial per relaxAfter calm steps', () => {
    const a = controller({ initial: 10, min: 2, relaxAfter: 3, driftHalfLife: 1 });
    const ws = [a.step(0, Array(16).fill(1))]; // drift at once (half-life 1): 10 -> 5
    expect(ws[0]).toBe(5);
    const rnd = seededRandom(5);
    const mean = (xs: number[]) => xs.reduce((x, y) => x + y, 0) / xs.length;
    // calm batches: exactly the population mean (z = 0), so the detectors settle and the base recovers
    for (let t = 1; t <= 40; t++) {
      const b = randomBatch(rnd);
      const shift = a.snapshot().popMean - mean(b);
      ws.push(
        a.step(
          t * 100,
          b.map((x) => x + shift),
        ),
      );
    }
    // narrows while the detectors still remember the easy batch, then climbs back one at a time
    const low = ws.indexOf(Math.min(...ws));
    expect(ws[low]).toBe(2);
    expect(ws.slice(low).every((w, i, xs) => i === 0 || w === xs[i - 1] || w === xs[i - 1] + 1)).toBe(true);
    expect(ws[ws.length - 1]).toBe(10);
    expect(Math.max(...ws)).toBe(10); // never above initial
  });

  it('within one wait, widens one notch per patience x usual step interval, then resets to the base', () => {
    const a = controller({ initial: 8, relaxAfter: 0, patience: 0.1, widenFactor: 1.5 });
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
    // the take ends the wait: back to the base (waits do not widen the base)
    expect(a.step(620 + 1000, randomBatch(rnd))).toBe(8);
  });

  it('WindowedFifo: a representative batch beyond the base window is taken at once, a skewed one waits for patience', () => {
    const f = new WindowedFifo({ inFlight: 16, window: 'adaptive', adaptive: { initial: 2, min: 2, patience: 0.5 } });
    let pos = 0;
    const sub = () => f.submit({ id: `e${pos}`, position: pos, submittedAt: 0, difficulty: (pos++ % 4) + 1 });
    for (let i = 0; i < 16; i++) sub(); // population: 1, 2, 3, 4, 1, 2, ...
    // a first step in order (the base window fills it): the controller learns the usual step interval from the next
    for (const i of [0, 1]) f.complete(`e${i}`, { tokens: 1, completedAt: 0 });
    expect(f.take({ now: 0, minItems: 2, maxItems: 2 }).map((e) => e.position)).toEqual([0, 1]);
    sub();
    sub();
    // entries 4..7 finish (difficulties 1, 2, 3, 4: the population's mix); the head (2, 3) has not
    for (const i of [4, 5, 6, 7]) f.complete(`e${i}`, { tokens: 1, completedAt: 10 });
    expect(f.window).toBe(2);
    expect(f.take({ now: 10, minItems: 4, maxItems: 4 }).map((e) => e.position)).toEqual([4, 5, 6, 7]);
    expect(f.lastTakeWindow).toBe(6); // the narrowest window that fills the batch: [2, 7]
    expect(f.window).toBe(2); // back to the base
    // now only easy entries finish beyond the window: 8 (1), 9 (2), 12 (1), mean 1.33 against 2.5
    for (const i of [8, 9, 12]) f.complete(`e${i}`, { tokens: 1, completedAt: 20 });
    expect(f.take({ now: 20, minItems: 3, maxItems: 3 })).toEqual([]); // the gate refuses: the trainer waits
    // usual step interval 10, patience 0.5: one notch (x1.5, at least +1) per 5 waited
    const ws: number[] = [];
    for (let k = 0; k < 6; k++) {
      f.trainerWaited(5);
      ws.push(f.window);
    }
    expect(ws).toEqual([3, 5, 7, 10, 15, 16]);
    expect(f.take({ now: 50, minItems: 3, maxItems: 3 }).map((e) => e.position)).toEqual([8, 9, 12]);
    expect(f.lastTakeWindow).toBe(16);
    expect(f.stats().maxOutOfOrder).toBeLessThanOrEqual(15);
    // without attributes the controller measures completion times
    const g = new WindowedFifo({ inFlight: 4, window: 'adaptive' });
    g.submit({ id: 'a', position: 0, submittedAt: 0 });
    g.complete('a', { tokens: 1, completedAt: 1000 });
    expect(g.take({ now: 1000 })).toHaveLength(1);
    expect(g.drift).not.toBeNull();
    expect(new WindowedFifo({ inFlight: 4, window: 2 }).drift).toBeNull();
    expect(new WindowedFifo({ inFlight: 4, window: 2 }).lastTakeWindow).toBeNull();
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
    bad({ mixGate: -0.5 }, 'adaptive.mixGate');
    bad({ mixGate: Infinity }, 'adaptive.mixGate');
    bad({ widenFactor: 1 }, 'adaptive.widenFactor');
    bad({ narrowFactor: 0 }, 'adaptive.narrowFactor');
    bad({ driftTolerance: -1 }, 'adaptive.driftTolerance');
    bad({ driftHalfLife: 0 }, 'adaptive.driftHalfLife');
    bad({ dispersionTolerance: NaN }, 'adaptive.dispersionTolerance');
    bad({ relaxAfter: 1.5 }, 'adaptive.relaxAfter');
    bad({ populationMemory: 0 }, 'adaptive.populationMemory');
    bad({ patience: -1 }, 'adaptive.patience');
    const arg = (fn: () => unknown, field: string) => {
      try {
        fn();
      } catch (e) {
        expect(e).toBeInstanceOf(SchedulingError);
        expect((e as SchedulingError).code).toBe('invalid_argument');
        expect((e as SchedulingError).field).toBe(field);
        return;
      }
      throw new Error(`expected an error on ${field}`);
    };
    arg(() => a.observe(NaN), 'difficulty');
    arg(() => a.waited(-1), 'ms');
    arg(() => a.step(Infinity, []), 'now');
    arg(() => a.step(1, [1, NaN]), 'difficulties[1]');
    arg(() => a.step(1, 'x' as never), 'difficulties');
    arg(() => a.admitsWider([Infinity]), 'difficulties[0]');
    arg(() => a.widenTo(0), 'w');
    expect(() => new AdaptiveWindow(a.cfg, { ...a.snapshot(), w: 1000 })).toThrow(/adaptive\.w/);
    expect(() => new AdaptiveWindow(a.cfg, { ...a.snapshot(), popVar: -1 })).toThrow(/adaptive\.popVar/);
  });
});
