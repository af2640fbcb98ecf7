import { describe, expect, it } from 'vitest';
import { rendezvousRank } from './rendezvous';

const owner = (key: string, members: string[]) => rendezvousRank(key, members, (m) => m)[0];
const sessions = Array.from({ length: 4000 }, (_, i) => `session-${i}`);

describe('rendezvous hashing', () => {
  it('is deterministic and spreads sessions evenly', () => {
    const members = ['http://a:8000', 'http://b:8000', 'http://c:8000', 'http://d:8000'];
    const counts = new Map<string, number>();
    for (const s of sessions) counts.set(owner(s, members), (counts.get(owner(s, members)) ?? 0) + 1);
    for (const m of members) expect(counts.get(m)! / sessions.length).toBeGreaterThan(0.2);
    expect(owner('x', members)).toBe(owner('x', [...members].reverse()));
  });

  it("moves only the leaving replica's sessions when one leaves", () => {
    const members = ['a', 'b', 'c', 'd', 'e'];
    const without = members.filter((m) => m !== 'c');
    let moved = 0;
    for (const s of sessions) {
      const before = owner(s, members);
      const after = owner(s, without);
      if (before !== after) {
        moved++;
        expect(before).toBe('c');
      }
    }
    expect(moved / sessions.length).toBeGreaterThan(0.12);
    expect(moved / sessions.length).toBeLessThan(0.28);
  });

  it('moves about 1/n of the sessions, all to the newcomer, when one joins', () => {
    const members = ['a', 'b', 'c', 'd'];
    const withF = [...members, 'f'];
    let moved = 0;
    for (const s of sessions) {
      const after = owner(s, withF);
      if (owner(s, members) !== after) {
        moved++;
        expect(after).toBe('f');
      }
    }
    expect(moved / sessions.length).toBeGreaterThan(0.12);
    expect(moved / sessions.length).toBeLessThan(0.28);
  });
});
