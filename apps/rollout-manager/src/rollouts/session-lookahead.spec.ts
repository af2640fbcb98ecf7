import { describe, expect, it } from 'vitest';
import { SessionLookahead, type LookaheadCandidate, type OpenedSession } from './session-lookahead';

const opened = (id: string): OpenedSession => ({
  sessionId: `s-${id}`,
  apiKey: 'k',
  baseUrl: 'http://x',
  expiresAt: Date.now() + 60_000,
  openMs: 1,
});

describe('SessionLookahead', () => {
  it('opens sessions for the first `depth` upcoming rollouts only, once each, and hands each over once', async () => {
    const opens: string[] = [];
    const la = new SessionLookahead(2, () => undefined);
    const cands = (ids: string[]): LookaheadCandidate[] =>
      ids.map((id) => ({
        rolloutId: id,
        open: async () => {
          opens.push(id);
          return opened(id);
        },
      }));
    la.fill(cands(['a', 'b', 'c']));
    la.fill(cands(['a', 'b', 'c']));
    expect(opens).toEqual(['a', 'b']);
    expect(la.size).toBe(2);
    expect((await la.take('a'))?.sessionId).toBe('s-a');
    expect(la.take('a')).toBeUndefined();
    expect(la.take('c')).toBeUndefined();
    // 'a' started: the window moves on to 'c'.
    la.fill(cands(['b', 'c', 'd']));
    expect(opens).toEqual(['a', 'b', 'c']);
    expect((await Promise.all(la.drain())).map((s) => s?.sessionId)).toEqual(['s-b', 's-c']);
    expect(la.size).toBe(0);
  });

  it('a failed open is reported and handed over as null (the rollout opens its own); depth 0 opens nothing', async () => {
    const errors: string[] = [];
    const la = new SessionLookahead(4, (id, err) => errors.push(`${id}: ${(err as Error).message}`));
    la.fill([{ rolloutId: 'x', open: () => Promise.reject(new Error('gateway down')) }]);
    expect(await la.take('x')).toBeNull();
    expect(errors).toEqual(['x: gateway down']);
    const none = new SessionLookahead(0, () => undefined);
    none.fill([{ rolloutId: 'y', open: async () => opened('y') }]);
    expect(none.size).toBe(0);
  });
});
