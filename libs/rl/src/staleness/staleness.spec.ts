import { describe, expect, it } from 'vitest';
import { seededRandom } from '../random';
import { StalenessController, StalenessInputError, tokenStaleness, versionBoundAdmits } from './index';

describe('versionBoundAdmits (the one shared rule)', () => {
  it('η = 1: a lag of exactly 1 admits, 2 refuses', () => {
    expect(versionBoundAdmits(5, 5, 1)).toBe(true);
    expect(versionBoundAdmits(5, 4, 1)).toBe(true);
    expect(versionBoundAdmits(5, 3, 1)).toBe(false);
  });

  it('η = 0 admits only when every in-flight rollout started at the current version', () => {
    expect(versionBoundAdmits(3, 3, 0)).toBe(true);
    expect(versionBoundAdmits(3, 2, 0)).toBe(false);
  });

  it('nothing in flight always admits', () => {
    expect(versionBoundAdmits(100, null, 0)).toBe(true);
  });

  it('rejects bad input, naming the field', () => {
    expect(() => versionBoundAdmits(-1, null, 1)).toThrow(/currentVersion/);
    expect(() => versionBoundAdmits(1.5, null, 1)).toThrow(/currentVersion/);
    expect(() => versionBoundAdmits(3, 4, 1)).toThrow(/oldestInFlightStartVersion/);
    expect(() => versionBoundAdmits(3, Number.NaN, 1)).toThrow(/oldestInFlightStartVersion/);
    expect(() => versionBoundAdmits(3, 2, -1)).toThrow(StalenessInputError);
  });
});

describe('StalenessController', () => {
  it('count bound: (η + 1)·B groups in flight + untrained; the next is refused (η = 1, B = 2: 4)', () => {
    const c = new StalenessController({ eta: 1, groupsPerStep: 2 });
    expect(c.capacity).toBe(4);
    for (const g of ['a', 'b', 'c', 'd']) expect(c.tryAdmit(g, 0)).toEqual({ admitted: true });
    const refused = c.tryAdmit('e', 0);
    expect(refused).toMatchObject({ admitted: false, reason: 'capacity' });
    // finishing generation does NOT release capacity
    c.finished('a');
    expect(c.tryAdmit('e', 0)).toMatchObject({ admitted: false, reason: 'capacity' });
    // training does
    expect(c.trained('a')).toBe(true);
    expect(c.tryAdmit('e', 0)).toEqual({ admitted: true });
    expect(c.refusals).toEqual({ capacity: 2, version: 0 });
  });

  it('dropped groups release capacity, in flight or finished (no producer deadlock)', () => {
    const c = new StalenessController({ eta: 0, groupsPerStep: 2 });
    c.tryAdmit('a', 0);
    c.tryAdmit('b', 0);
    c.finished('b');
    expect(c.tryAdmit('c', 0)).toMatchObject({ admitted: false, reason: 'capacity' });
    expect(c.dropped('a')).toBe(true);
    expect(c.dropped('b')).toBe(true);
    expect(c.used).toBe(0);
    expect(c.dropped('b')).toBe(false); // redelivered: harmless
    expect(c.trained('zzz')).toBe(false);
    expect(c.tryAdmit('c', 0)).toEqual({ admitted: true });
  });

  it('a trained group frees its slot when the version its batch produced serves (η = 0 never starts a group on replaced weights)', () => {
    const c = new StalenessController({ eta: 0, groupsPerStep: 2 });
    c.tryAdmit('a', 0);
    c.tryAdmit('b', 0);
    c.finished('a');
    c.finished('b');
    // the batch of a and b made version 1; version 0 still serves
    expect(c.trained('a', { releaseAtVersion: 1, currentVersion: 0 })).toBe(true);
    expect(c.trained('b', { releaseAtVersion: 1, currentVersion: 0 })).toBe(true);
    expect(c.used).toBe(2);
    expect(c.tryAdmit('c', 0)).toMatchObject({
      admitted: false,
      reason: 'capacity',
      detail: expect.stringMatching(/2 trained into a version not serving yet/),
    });
    expect(c.snapshot().awaitingVersion).toEqual([
      { groupId: 'a', version: 1 },
      { groupId: 'b', version: 1 },
    ]);
    expect(c.trained('a', { releaseAtVersion: 1, currentVersion: 0 })).toBe(false); // redelivered: harmless
    expect(c.activated(0)).toBe(0);
    expect(c.activated(1)).toBe(2);
    expect(c.used).toBe(0);
    expect(c.tryAdmit('c', 1)).toEqual({ admitted: true });
    // already serving (the activation came first) or a skipped batch (no new version): released at once
    c.finished('c');
    expect(c.trained('c', { releaseAtVersion: 1, currentVersion: 1 })).toBe(true);
    expect(c.used).toBe(0);
    // a group dropped while it waits releases too
    c.tryAdmit('d', 1);
    c.finished('d');
    c.trained('d', { releaseAtVersion: 2, currentVersion: 1 });
    expect(c.dropped('d')).toBe(true);
    expect(c.used).toBe(0);
    expect(() => c.trained('e', { releaseAtVersion: -1, currentVersion: 0 })).toThrow(StalenessInputError);
  });

  it('version bound at η = 1: an in-flight group from version v blocks admissions at v + 2, not at v + 1', () => {
    const c = new StalenessController({ eta: 1, groupsPerStep: 100 });
    c.tryAdmit('old', 3);
    expect(c.tryAdmit('g4', 4)).toEqual({ admitted: true });
    const r = c.tryAdmit('g5', 5);
    expect(r).toMatchObject({ admitted: false, reason: 'version' });
    expect((r as { detail: string }).detail).toMatch(/5 − oldest in-flight start version 3 = 2 > η = 1/);
    // a finished group no longer holds the version bound back
    c.finished('old');
    expect(c.tryAdmit('g5', 5)).toEqual({ admitted: true });
    expect(c.oldestInFlightStartVersion).toBe(4);
  });

  it('re-admitting an in-flight group is idempotent; a finished one is an error; unknown finish is an error', () => {
    const c = new StalenessController({ eta: 1, groupsPerStep: 1 });
    c.tryAdmit('a', 0);
    expect(c.tryAdmit('a', 0)).toEqual({ admitted: true, alreadyAdmitted: true });
    expect(c.used).toBe(1);
    c.finished('a');
    c.finished('a'); // idempotent
    expect(() => c.tryAdmit('a', 1)).toThrow(/already finished/);
    expect(() => c.finished('nope')).toThrow(/never admitted/);
    c.tryAdmit('b', 0);
    expect(() => c.trained('b')).toThrow(/still in flight/);
  });

  it('snapshot → restore rebuilds the same counters and decisions', () => {
    const rnd = seededRandom(7);
    const cfg = { eta: 2, groupsPerStep: 3 };
    const a = new StalenessController(cfg);
    let version = 0;
    let next = 0;
    const live: string[] = [];
    const done: string[] = [];
    for (let step = 0; step < 400; step++) {
      const x = rnd();
      if (x < 0.45) {
        const id = `g${next++}`;
        if (a.tryAdmit(id, version).admitted) live.push(id);
      } else if (x < 0.7 && live.length) done.push(...live.splice(Math.floor(rnd() * live.length), 1).map((g) => (a.finished(g), g)));
      else if (x < 0.8 && done.length) a.trained(done.splice(0, 1)[0]);
      else if (x < 0.85 && done.length) a.trained(done.splice(0, 1)[0], { releaseAtVersion: version + 1, currentVersion: version });
      else if (x < 0.9 && live.length) a.dropped(live.splice(0, 1)[0]);
      else a.activated(++version);
      expect(a.used).toBeLessThanOrEqual(a.capacity);
      if (step % 50 === 49) {
        const b = StalenessController.restore(cfg, a.snapshot());
        expect(b.snapshot()).toEqual(a.snapshot());
        const probe = `probe${step}`;
        const ra = a.tryAdmit(probe, version);
        const rb = b.tryAdmit(probe, version);
        expect(rb).toEqual(ra);
        if (ra.admitted) a.dropped(probe);
      }
    }
  });

  it('every admission keeps both bounds at the moment it is made', () => {
    const rnd = seededRandom(11);
    const cfg = { eta: 1, groupsPerStep: 2 };
    const c = new StalenessController(cfg);
    let version = 0;
    const live: string[] = [];
    for (let i = 0; i < 500; i++) {
      const x = rnd();
      if (x < 0.5) {
        const r = c.tryAdmit(`g${i}`, version);
        if (r.admitted) {
          live.push(`g${i}`);
          expect(c.used).toBeLessThanOrEqual(c.capacity);
          expect(version - c.oldestInFlightStartVersion!).toBeLessThanOrEqual(cfg.eta);
        }
      } else if (x < 0.8 && live.length) {
        const g = live.shift()!;
        c.finished(g);
        c.trained(g);
      } else version++;
    }
  });

  it('restore validates and accepts a state over capacity', () => {
    const cfg = { eta: 0, groupsPerStep: 1 };
    const c = StalenessController.restore(cfg, { inFlight: [{ groupId: 'a', startVersion: 1 }], untrained: ['b', 'c'] });
    expect(c.used).toBe(3);
    expect(c.tryAdmit('d', 1)).toMatchObject({ admitted: false, reason: 'capacity' });
    expect(() => StalenessController.restore(cfg, { inFlight: [{ groupId: 'a', startVersion: -1 }], untrained: [] })).toThrow(
      /state\.inFlight\[0\]\.startVersion/,
    );
    expect(() => StalenessController.restore(cfg, { inFlight: [{ groupId: 'a', startVersion: 0 }], untrained: ['a'] })).toThrow(
      /state\.untrained\[0\]/,
    );
    expect(() => StalenessController.restore(cfg, { inFlight: [], untrained: [''] })).toThrow(/state\.untrained\[0\]/);
  });

  it('config validation', () => {
    expect(() => new StalenessController({ eta: -1, groupsPerStep: 1 })).toThrow(/cfg\.eta/);
    expect(() => new StalenessController({ eta: 1, groupsPerStep: 0 })).toThrow(/cfg\.groupsPerStep/);
    expect(() => new StalenessController({ eta: 0.5, groupsPerStep: 1 })).toThrow(/cfg\.eta/);
    const c = new StalenessController({ eta: 1, groupsPerStep: 1 });
    expect(() => c.tryAdmit('', 0)).toThrow(/groupId/);
    expect(() => c.tryAdmit('a', -2)).toThrow(/currentVersion/);
  });
});

describe('tokenStaleness', () => {
  it('mean, max and share older than k', () => {
    const s = tokenStaleness([Uint32Array.from([10, 9, 8]), [7, 10]], 10, 1);
    expect(s.tokens).toBe(5);
    expect(s.mean).toBeCloseTo((0 + 1 + 2 + 3 + 0) / 5, 12);
    expect(s.max).toBe(3);
    expect(s.shareOlderThanK).toBeCloseTo(2 / 5, 12); // 2 and 3 versions behind; exactly 1 behind is not "more than k"
  });

  it('empty batches give zeros; bad versions are named', () => {
    expect(tokenStaleness([], 3, 1)).toEqual({ mean: 0, max: 0, shareOlderThanK: 0, tokens: 0 });
    expect(() => tokenStaleness([[1, 4]], 3, 1)).toThrow(/versions\[0\]\[1\]/);
    expect(() => tokenStaleness([[1, Number.NaN]], 3, 1)).toThrow(/versions\[0\]\[1\]/);
    expect(() => tokenStaleness([[1]], 3, -1)).toThrow(/\bk\b/);
  });
});
