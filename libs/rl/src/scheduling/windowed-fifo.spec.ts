import { describe, expect, it } from 'vitest';
import { seededRandom } from '../random';
import { defaultWindow, offPolicyBoundPositions, offPolicyBoundSteps, SchedulingError, WindowedFifo, type WindowConfig } from './index';

const entry = (i: number, at = 0, difficulty?: number) => ({
  id: `r${i}`,
  position: i,
  submittedAt: at,
  ...(difficulty === undefined ? {} : { difficulty }),
});

function fill(f: WindowedFifo, from: number, count: number, at = 0) {
  for (let i = from; i < from + count; i++) f.submit(entry(i, at));
}

function expectError(fn: () => unknown, code: string, field: string) {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(SchedulingError);
    expect((e as SchedulingError).code).toBe(code);
    expect((e as SchedulingError).field).toBe(field);
    return;
  }
  throw new Error(`expected SchedulingError ${code} on ${field}`);
}

describe('WindowedFifo: the published example N = 8, W = 4', () => {
  it('max out-of-order tolerance is W - 1 = 3, on the worst-case schedule', () => {
    const f = new WindowedFifo({ inFlight: 8, window: 4 });
    fill(f, 0, 8);
    // everything but the head completes: only [head, head + 3] may be taken
    for (let i = 1; i < 8; i++) f.complete(`r${i}`, { tokens: 10, completedAt: 1 });
    const got = f.take({ now: 1 });
    expect(got.map((e) => e.position)).toEqual([1, 2, 3]);
    expect(got.map((e) => e.outOfOrder)).toEqual([1, 1, 1]);
    // younger entries stay blocked: the window advances only as the head is consumed
    expect(f.take({ now: 2 })).toEqual([]);
    expect(f.stats().blocked).toBe(4);
    // a worst case for one entry: W - 1 older entries still unconsumed when it is taken
    const g = new WindowedFifo({ inFlight: 8, window: 4 });
    fill(g, 0, 8);
    g.complete('r3', { tokens: 1, completedAt: 1 });
    const [t] = g.take({ now: 1 });
    expect(t.position).toBe(3);
    expect(t.outOfOrder).toBe(3);
    expect(g.stats().maxOutOfOrder).toBe(3);
    // and never more: r4 is outside [0, 3]
    g.complete('r4', { tokens: 1, completedAt: 1 });
    expect(g.take({ now: 1 })).toEqual([]);
  });

  it('max off-policy lag is N + W - 2 = 10 positions, on the worst-case schedule', () => {
    const N = 8,
      W = 4;
    const f = new WindowedFifo({ inFlight: N, window: W });
    let next = 0;
    const submit = () => f.submit(entry(next++));
    for (let i = 0; i < N; i++) submit();
    // the straggler is submitted last: N - 1 older entries are ahead of it
    const straggler = 'r7';
    // consume the 7 older ones one at a time, each replaced at once
    for (let i = 0; i < N - 1; i++) {
      f.complete(`r${i}`, { tokens: 1, completedAt: 1 });
      expect(f.take({ now: 1, maxItems: 1 }).map((e) => e.id)).toEqual([`r${i}`]);
      submit();
    }
    expect(f.head).toBe(7);
    // the straggler is the head now; everything younger completes, W - 1 of them may pass it
    for (let i = 8; i < next; i++) f.complete(`r${i}`, { tokens: 1, completedAt: 2 });
    const passed = f.take({ now: 2 });
    expect(passed.map((e) => e.position)).toEqual([8, 9, 10]);
    for (let k = 0; k < passed.length; k++) submit();
    expect(f.take({ now: 3 })).toEqual([]); // blocked
    f.complete(straggler, { tokens: 1, completedAt: 4 });
    const [s] = f.take({ now: 4, maxItems: 1 });
    expect(s.id).toBe(straggler);
    expect(s.lag).toBe(N + W - 2);
    expect(s.lag).toBe(10);
    expect(offPolicyBoundPositions(N, W)).toBe(10);
    expect(f.stats().maxLag).toBe(10);
  });
});

describe('WindowedFifo: window extremes and defaults', () => {
  it('W = 1 is strict FIFO', () => {
    const f = new WindowedFifo({ inFlight: 5, window: 1 });
    fill(f, 0, 5);
    f.complete('r2', { tokens: 1, completedAt: 1 });
    f.complete('r1', { tokens: 1, completedAt: 1 });
    expect(f.take({ now: 1 })).toEqual([]);
    f.complete('r0', { tokens: 1, completedAt: 2 });
    const got = f.take({ now: 2 });
    expect(got.map((e) => e.id)).toEqual(['r0', 'r1', 'r2']);
    expect(got.every((e) => e.outOfOrder === 0)).toBe(true);
  });

  it('W = 1 takes in submission order on any random completion order', () => {
    const rnd = seededRandom(7);
    const f = new WindowedFifo({ inFlight: 20, window: 1 });
    fill(f, 0, 20);
    const order = Array.from({ length: 20 }, (_, i) => i).sort(() => rnd() - 0.5);
    const taken: number[] = [];
    for (const i of order) {
      f.complete(`r${i}`, { tokens: 1, completedAt: 1 });
      taken.push(...f.take({ now: 1 }).map((e) => e.position));
    }
    expect(taken).toEqual(Array.from({ length: 20 }, (_, i) => i));
  });

  it('W = N is greedy: with N in flight every completed entry can be taken', () => {
    const N = 6;
    const f = new WindowedFifo({ inFlight: N, window: N });
    fill(f, 0, N);
    for (const i of [5, 3, 1]) f.complete(`r${i}`, { tokens: 1, completedAt: 1 });
    expect(f.take({ now: 1 }).map((e) => e.position)).toEqual([1, 3, 5]);
  });

  it('default W = round(0.3 N), at least 1', () => {
    expect(new WindowedFifo({ inFlight: 8 }).window).toBe(2);
    expect(new WindowedFifo({ inFlight: 64 }).window).toBe(19);
    expect(new WindowedFifo({ inFlight: 1 }).window).toBe(1);
    expect(defaultWindow(3)).toBe(1);
  });
});

describe('WindowedFifo: batches by count and by token budget', () => {
  it('maxItems and minItems', () => {
    const f = new WindowedFifo({ inFlight: 8, window: 8 });
    fill(f, 0, 8);
    for (let i = 0; i < 3; i++) f.complete(`r${i}`, { tokens: 5, completedAt: 1 });
    expect(f.take({ now: 1, minItems: 4, maxItems: 4 })).toEqual([]); // nothing taken
    expect(f.stats().ready).toBe(3);
    f.complete('r5', { tokens: 5, completedAt: 2 });
    expect(f.take({ now: 2, minItems: 4, maxItems: 4 }).map((e) => e.position)).toEqual([0, 1, 2, 5]);
  });

  it('maxTokens cuts the batch in queue order; an oversize entry is taken alone; minTokens waits', () => {
    const f = new WindowedFifo({ inFlight: 8, window: 8 });
    fill(f, 0, 8);
    const tokens = [30, 40, 50, 500, 10, 10];
    tokens.forEach((t, i) => f.complete(`r${i}`, { tokens: t, completedAt: 1 }));
    expect(f.take({ now: 1, maxTokens: 100 }).map((e) => e.tokens)).toEqual([30, 40]);
    expect(f.take({ now: 1, maxTokens: 100 }).map((e) => e.tokens)).toEqual([50]);
    expect(f.take({ now: 1, maxTokens: 100 }).map((e) => e.tokens)).toEqual([500]); // alone, never blocks the head
    expect(f.take({ now: 1, maxTokens: 100, minTokens: 50 })).toEqual([]); // 20 tokens, budget not full
    f.complete('r6', { tokens: 90, completedAt: 2 });
    expect(f.take({ now: 2, maxTokens: 100, minTokens: 50 }).map((e) => e.tokens)).toEqual([10, 10]); // 90 more would overflow: full
  });
});

describe('WindowedFifo: drops and the head age limit', () => {
  it('a dropped head leaves the queue and unblocks the window, counted by reason', () => {
    const f = new WindowedFifo({ inFlight: 4, window: 2 });
    fill(f, 0, 4);
    f.complete('r2', { tokens: 1, completedAt: 1 });
    f.complete('r3', { tokens: 1, completedAt: 1 });
    expect(f.take({ now: 1 })).toEqual([]); // window [0, 1]
    f.drop('r0', 'env_error');
    f.drop('r1', 'zero_variance');
    expect(f.head).toBe(2);
    expect(f.take({ now: 2 }).map((e) => e.id)).toEqual(['r2', 'r3']);
    expect(f.stats().dropped).toEqual({ env_error: 1, zero_variance: 1 });
    expect(f.head).toBeNull();
  });

  it('a dropped entry inside the window keeps its slot until the head passes it (no extra bypass)', () => {
    const f = new WindowedFifo({ inFlight: 4, window: 2 });
    fill(f, 0, 4);
    f.drop('r1', 'filtered');
    f.complete('r2', { tokens: 1, completedAt: 1 });
    expect(f.take({ now: 1 })).toEqual([]); // window is [r0, r1]
    f.complete('r0', { tokens: 1, completedAt: 1 });
    expect(f.take({ now: 1 }).map((e) => e.id)).toEqual(['r0', 'r2']);
  });

  it('head age limit exposes a stalled head once, counted; dropping it unblocks', () => {
    const f = new WindowedFifo({ inFlight: 4, window: 1, headAgeLimitMs: 1000 });
    fill(f, 0, 4, 0);
    f.complete('r1', { tokens: 1, completedAt: 10 });
    expect(f.expiredHead(1000)).toBeNull();
    const h = f.expiredHead(1001);
    expect(h).toEqual({ id: 'r0', position: 0, submittedAt: 0 });
    expect(f.expiredHead(2000)?.id).toBe('r0');
    expect(f.stats().headExpired).toBe(1);
    f.drop(h!.id, 'head_age_limit');
    expect(f.take({ now: 2001 }).map((e) => e.id)).toEqual(['r1']);
    expect(f.stats().dropped).toEqual({ head_age_limit: 1 });
    // a completed head is not stalled: the trainer can take it
    const g = new WindowedFifo({ inFlight: 3, window: 1, headAgeLimitMs: 5 });
    g.submit(entry(0));
    g.complete('r0', { tokens: 1, completedAt: 1 });
    expect(g.expiredHead(100)).toBeNull();
    // but when a batch needs more than the completed head, the first unfinished entry is what the window waits on
    g.submit(entry(1, 0));
    g.submit(entry(2, 50));
    g.complete('r2', { tokens: 1, completedAt: 51 });
    expect(g.take({ now: 100, minItems: 3 })).toEqual([]);
    expect(g.expiredHead(100)?.id).toBe('r1');
    g.drop('r1', 'head_age_limit');
    expect(g.take({ now: 100, minItems: 2 }).map((e) => e.id)).toEqual(['r0', 'r2']);
    expect(new WindowedFifo({ inFlight: 2 }).expiredHead(1e12)).toBeNull(); // no limit configured
  });
});

describe('WindowedFifo: off-policy bound in steps (property)', () => {
  it('offPolicyBoundSteps(S, W, P) = S + ceil((W - 1) / P)', () => {
    expect(offPolicyBoundSteps(3, 1, 4)).toBe(3);
    expect(offPolicyBoundSteps(3, 4, 4)).toBe(4);
    expect(offPolicyBoundSteps(3, 5, 4)).toBe(4);
    expect(offPolicyBoundSteps(3, 6, 4)).toBe(5);
    expect(offPolicyBoundSteps(1, 4, 2)).toBe(3); // N = 4, B=2 : TitanRL form
  });

  // N = (S + 1) P entries in flight, P per step; a step's entries are replaced once the step is trained (the
  // staleness controller releases capacity on trained()), under the version it produced. Random completion
  // orders (heavy-tailed), random W; the age of every consumed entry in steps must stay within the bound, and
  // the positional lag within N + W - 2.
  it('no random schedule exceeds S + ceil((W - 1) / P) steps or N + W - 2 positions', () => {
    const rnd = seededRandom(20261201);
    let worstSteps = 0,
      hitBound = 0;
    const violations: string[] = [];
    for (let trial = 0; trial < 300; trial++) {
      const S = Math.floor(rnd() * 4),
        P = 1 + Math.floor(rnd() * 4),
        N = (S + 1) * P;
      const W = 1 + Math.floor(rnd() * N);
      const bound = offPolicyBoundSteps(S, W, P);
      const f = new WindowedFifo({ inFlight: N, window: W });
      const version = new Map<string, number>();
      let pos = 0,
        v = 0,
        now = 0;
      const pending: string[] = [];
      const submit = () => {
        const id = `e${pos}`;
        f.submit({ id, position: pos++, submittedAt: now });
        version.set(id, v);
        pending.push(id);
      };
      for (let i = 0; i < N; i++) submit();
      let maxAge = 0;
      for (let step = 0; step < 60; step++) {
        let batch = f.take({ now, minItems: P, maxItems: P });
        let guard = 0;
        while (batch.length === 0) {
          // complete a random pending entry (a straggler is picked rarely: heavy tail)
          const k = rnd() < 0.15 ? Math.floor(rnd() * pending.length) : Math.floor(rnd() ** 3 * pending.length);
          const idx = pending.length - 1 - k;
          const [id] = pending.splice(Math.max(0, idx), 1);
          f.complete(id, { tokens: 1, completedAt: ++now });
          batch = f.take({ now, minItems: P, maxItems: P });
          if (++guard > 10 * N) throw new Error('no progress');
        }
        for (const e of batch) {
          const age = v - (version.get(e.id) as number);
          maxAge = Math.max(maxAge, age);
          if (age > bound || e.lag > N + W - 2 || e.outOfOrder > W - 1)
            violations.push(`S=${S} P=${P} W=${W}: age ${age} (bound ${bound}), lag ${e.lag}, outOfOrder ${e.outOfOrder}`);
          version.delete(e.id);
        }
        v++; // trained
        for (let i = 0; i < batch.length; i++) submit();
      }
      worstSteps = Math.max(worstSteps, maxAge);
      if (maxAge === bound) hitBound++;
    }
    // the bound is reached by some schedules (it is tight), never exceeded
    expect(violations).toEqual([]);
    expect(hitBound).toBeGreaterThan(0);
    expect(worstSteps).toBeGreaterThan(0);
  });
});

describe('WindowedFifo: adaptive W stays within the bounds of W = max (property)', () => {
  // Random N, P, adaptive knobs and difficulty mixes; the trainer reports its waits. Whatever the controller does
  // (mix gate, patience, narrowing), every take uses a window in [1, max], no entry bypasses more than that window's
  // W - 1 older ones, and ages stay within the bounds of W = max.
  it('no random schedule exceeds S + ceil((max - 1) / P) steps, N + max - 2 positions, or the window it used', () => {
    const rnd = seededRandom(777);
    const violations: string[] = [];
    let gated = 0,
      trials = 0;
    for (let trial = 0; trial < 200; trial++) {
      const S = Math.floor(rnd() * 4),
        P = 1 + Math.floor(rnd() * 4),
        N = (S + 1) * P;
      const max = 1 + Math.floor(rnd() * N);
      const min = 1 + Math.floor(rnd() * max);
      const adaptive = {
        min,
        max,
        initial: min + Math.floor(rnd() * (max - min + 1)),
        mixGate: rnd() * 2,
        patience: rnd() < 0.2 ? 0 : rnd(),
      };
      const f = new WindowedFifo({ inFlight: N, window: 'adaptive', adaptive });
      const bound = offPolicyBoundSteps(S, max, P);
      const version = new Map<string, number>();
      const difficulty = new Map<string, number>();
      let pos = 0,
        v = 0,
        now = 0;
      const pending: string[] = [];
      const submit = () => {
        const id = `e${pos}`;
        const d = 1 + Math.floor(rnd() * 4);
        f.submit({ id, position: pos++, submittedAt: now, difficulty: d });
        version.set(id, v);
        difficulty.set(id, d);
        pending.push(id);
      };
      for (let i = 0; i < N; i++) submit();
      for (let step = 0; step < 60; step++) {
        let batch = f.take({ now, minItems: P, maxItems: P });
        let guard = 0;
        while (batch.length === 0) {
          // easy entries finish first more often (the skew greedy windows pick up)
          const easy = pending.filter((id) => (difficulty.get(id) as number) <= 2);
          const from = easy.length > 0 && rnd() < 0.7 ? easy : pending;
          const id = from[Math.floor(rnd() * from.length)];
          pending.splice(pending.indexOf(id), 1);
          const dt = 1 + Math.floor(rnd() * 5);
          now += dt;
          f.complete(id, { tokens: 1, completedAt: now });
          f.trainerWaited(dt);
          batch = f.take({ now, minItems: P, maxItems: P });
          if (++guard > 10 * N) throw new Error('no progress');
        }
        const used = f.lastTakeWindow as number;
        if (used > f.window) gated++;
        if (used < 1 || used > max) violations.push(`window ${used} outside [1, ${max}]`);
        for (const e of batch) {
          const age = v - (version.get(e.id) as number);
          if (age > bound || e.lag > N + max - 2 || e.outOfOrder > used - 1)
            violations.push(
              `S=${S} P=${P} max=${max}: age ${age} (bound ${bound}), lag ${e.lag}, outOfOrder ${e.outOfOrder} with W ${used}`,
            );
          version.delete(e.id);
        }
        v++;
        now += 1;
        for (let i = 0; i < batch.length; i++) submit();
      }
      trials++;
    }
    expect(violations).toEqual([]);
    expect(trials).toBe(200);
    expect(gated).toBeGreaterThan(0); // the controller did widen past its base: the bounds were exercised
  });
});

describe('WindowedFifo: snapshot / restore', () => {
  it('restores the queue, the window slots of entries consumed after the head and the counters', () => {
    const cfg: WindowConfig = { inFlight: 6, window: 3 };
    const f = new WindowedFifo(cfg);
    fill(f, 0, 6);
    f.complete('r2', { tokens: 7, completedAt: 1, version: 0 });
    f.complete('r1', { tokens: 5, completedAt: 1 });
    expect(f.take({ now: 1, maxItems: 1 }).map((e) => e.id)).toEqual(['r1']);
    f.drop('r4', 'env_error');
    const snap = JSON.parse(JSON.stringify(f.snapshot()));
    const g = WindowedFifo.restore(cfg, snap);
    expect(g.head).toBe(0);
    expect(g.stats()).toEqual(f.stats());
    // both behave the same from here
    f.complete('r3', { tokens: 1, completedAt: 2 });
    g.complete('r3', { tokens: 1, completedAt: 2 });
    expect(g.take({ now: 2 })).toEqual(f.take({ now: 2 }));
    expect(g.take({ now: 2 })).toEqual([]); // r3 is outside [r0, r2]: r1's slot still counts
    f.complete('r0', { tokens: 1, completedAt: 3 });
    g.complete('r0', { tokens: 1, completedAt: 3 });
    expect(g.take({ now: 3 })).toEqual(f.take({ now: 3 }));
    expect(g.snapshot()).toEqual(f.snapshot());
    // a position the head already passed cannot come back
    expectError(() => g.submit(entry(1)), 'stale_position', 'position');
  });

  it('restores from rows a caller reads back (no counters), and the adaptive state', () => {
    const g = WindowedFifo.restore(
      { inFlight: 4, window: 2 },
      {
        entries: [
          { id: 'a', position: 10, submittedAt: 0, status: 'pending' },
          { id: 'b', position: 11, submittedAt: 0, status: 'taken', tokens: 1, completedAt: 1 },
          { id: 'c', position: 12, submittedAt: 0, status: 'completed', tokens: 3, completedAt: 1 },
        ],
        passedPosition: 9,
      },
    );
    expect(g.head).toBe(10);
    expect(g.take({ now: 2 })).toEqual([]); // c is blocked: b keeps its slot
    const cfg: WindowConfig = { inFlight: 10, window: 'adaptive' };
    const a = new WindowedFifo(cfg);
    fill(a, 0, 10);
    a.trainerWaited(50);
    const b = WindowedFifo.restore(cfg, a.snapshot());
    expect(b.snapshot()).toEqual(a.snapshot());
  });

  it('refuses bad state, naming the field', () => {
    const cfg: WindowConfig = { inFlight: 4, window: 2 };
    const e = (over: object) => ({ id: 'a', position: 1, submittedAt: 0, status: 'pending', ...over });
    expectError(
      () => WindowedFifo.restore(cfg, { entries: [e({}), e({ id: 'b' })], passedPosition: null } as never),
      'duplicate_position',
      'entries[1].position',
    );
    expectError(
      () => WindowedFifo.restore(cfg, { entries: [e({}), e({ position: 2 })], passedPosition: null } as never),
      'duplicate_id',
      'entries[1].id',
    );
    expectError(
      () => WindowedFifo.restore(cfg, { entries: [e({ position: 3 }), e({ id: 'b', position: 2 })], passedPosition: null } as never),
      'invalid_state',
      'entries[1].position',
    );
    expectError(
      () => WindowedFifo.restore(cfg, { entries: [e({ status: 'done' })], passedPosition: null } as never),
      'invalid_state',
      'entries[0].status',
    );
    expectError(
      () => WindowedFifo.restore(cfg, { entries: [e({ status: 'completed' })], passedPosition: null } as never),
      'invalid_state',
      'entries[0].tokens',
    );
    expectError(() => WindowedFifo.restore(cfg, { entries: [e({})], passedPosition: 1 } as never), 'stale_position', 'entries[0].position');
    expectError(() => WindowedFifo.restore(cfg, { entries: [], passedPosition: null, window: 3 }), 'invalid_state', 'window');
    expectError(() => WindowedFifo.restore(cfg, { entries: 'x', passedPosition: null } as never), 'invalid_state', 'entries');
  });
});

describe('WindowedFifo: bad input gets typed errors naming the field', () => {
  it('config', () => {
    expectError(() => new WindowedFifo({ inFlight: 8, window: 0 }), 'invalid_config', 'window');
    expectError(() => new WindowedFifo({ inFlight: 8, window: 9 }), 'invalid_config', 'window');
    expectError(() => new WindowedFifo({ inFlight: 8, window: 2.5 }), 'invalid_config', 'window');
    expectError(() => new WindowedFifo({ inFlight: 0 }), 'invalid_config', 'inFlight');
    expectError(() => new WindowedFifo({ inFlight: 8, headAgeLimitMs: 0 }), 'invalid_config', 'headAgeLimitMs');
    expectError(() => new WindowedFifo({ inFlight: 8, headAgeLimitMs: NaN }), 'invalid_config', 'headAgeLimitMs');
    expectError(() => new WindowedFifo({ inFlight: 8, window: 4, adaptive: { min: 1 } }), 'invalid_config', 'adaptive');
    expectError(() => new WindowedFifo({ inFlight: 8, window: 'adaptive', adaptive: { max: 9 } }), 'invalid_config', 'adaptive.max');
    expectError(
      () => new WindowedFifo({ inFlight: 8, window: 'adaptive', adaptive: { min: 5, max: 4 } }),
      'invalid_config',
      'adaptive.min',
    );
    expectError(
      () => new WindowedFifo({ inFlight: 8, window: 'adaptive', adaptive: { narrowFactor: 1 } }),
      'invalid_config',
      'adaptive.narrowFactor',
    );
    expectError(() => offPolicyBoundSteps(-1, 1, 1), 'invalid_argument', 'S');
    expectError(() => offPolicyBoundSteps(1, 0, 1), 'invalid_argument', 'W');
    expectError(() => offPolicyBoundSteps(1, 1, 0), 'invalid_argument', 'P');
    expectError(() => offPolicyBoundPositions(4, 5), 'invalid_argument', 'W');
  });

  it('entries, ids and take options', () => {
    const f = new WindowedFifo({ inFlight: 4, window: 2 });
    f.submit(entry(0));
    expectError(() => f.submit(entry(0)), 'duplicate_id', 'id');
    expectError(() => f.submit({ ...entry(0), id: 'other' }), 'duplicate_position', 'position');
    expectError(() => f.submit({ ...entry(1), position: 1.5 }), 'invalid_argument', 'position');
    expectError(() => f.submit({ ...entry(1), id: '' }), 'invalid_argument', 'id');
    expectError(() => f.submit({ ...entry(1), submittedAt: Infinity }), 'invalid_argument', 'submittedAt');
    expectError(() => f.submit({ ...entry(1), difficulty: NaN }), 'invalid_argument', 'difficulty');
    expectError(() => f.complete('nope', { tokens: 1, completedAt: 1 }), 'unknown_id', 'id');
    expectError(() => f.complete('r0', { tokens: -1, completedAt: 1 }), 'invalid_argument', 'tokens');
    expectError(() => f.complete('r0', { tokens: 1, completedAt: NaN }), 'invalid_argument', 'completedAt');
    expectError(() => f.drop('nope', 'x'), 'unknown_id', 'id');
    expectError(() => f.drop('r0', ''), 'invalid_argument', 'reason');
    f.complete('r0', { tokens: 1, completedAt: 1 });
    expectError(() => f.complete('r0', { tokens: 1, completedAt: 1 }), 'invalid_transition', 'id');
    expectError(() => f.take({ now: NaN }), 'invalid_argument', 'now');
    expectError(() => f.take({ now: 1, maxItems: 0 }), 'invalid_argument', 'maxItems');
    expectError(() => f.take({ now: 1, maxItems: 2, minItems: 3 }), 'invalid_argument', 'minItems');
    expectError(() => f.take({ now: 1, maxTokens: 10, minTokens: 11 }), 'invalid_argument', 'minTokens');
    expectError(() => f.trainerWaited(-1), 'invalid_argument', 'ms');
    expectError(() => f.expiredHead(NaN), 'invalid_argument', 'now');
    // late arrivals (reordered submission events) are inserted by position
    f.submit(entry(3));
    f.submit(entry(2));
    expect(f.take({ now: 1 }).map((e) => e.id)).toEqual(['r0']);
    expect(f.head).toBe(2);
    expectError(() => f.drop('r0', 'x'), 'unknown_id', 'id'); // older than the head: forgotten
  });

  it('a late submission older than the head becomes the head; a dropped straggler cannot complete later', () => {
    const f = new WindowedFifo({ inFlight: 4, window: 2, headAgeLimitMs: 10 });
    f.submit(entry(5));
    f.submit(entry(7));
    f.submit(entry(3)); // reordered submission event: older than the head
    expect(f.head).toBe(3);
    f.complete('r3', { tokens: 1, completedAt: 1 });
    expect(f.take({ now: 1 }).map((e) => e.id)).toEqual(['r3']);
    f.submit(entry(4)); // still after the passed position 3
    expect(f.head).toBe(4);
    expectError(() => f.submit(entry(2)), 'stale_position', 'position');
    // the straggler at the head is exposed, aborted and dropped; its late completion is refused, typed
    expect(f.expiredHead(11)?.id).toBe('r4');
    f.drop('r4', 'head_age_limit');
    expectError(() => f.complete('r4', { tokens: 1, completedAt: 12 }), 'unknown_id', 'id');
    // a dropped entry still inside the queue (younger than the head) refuses completion as a bad transition
    f.drop('r7', 'env_error');
    expectError(() => f.complete('r7', { tokens: 1, completedAt: 12 }), 'invalid_transition', 'id');
    expect(f.stats().dropped).toEqual({ head_age_limit: 1, env_error: 1 });
    expect(f.stats().headExpired).toBe(1);
  });
});
