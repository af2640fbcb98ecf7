import { describe, expect, it } from 'vitest';
import type { EventEnvelope } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import type { SqlClient } from '../db/sql-client';
import type { StoredCapture } from './capture-store';
import { RecordCommitter, RecordNotDurableError, type CommitRequest } from './record-committer';

/** A database that answers the commit statement like PostgreSQL would, after `delayMs`, and records what it was sent. */
class FakeSql {
  readonly statements: { name: string; values: unknown[] }[] = [];
  readonly callCount = new Map<string, number>();
  closed = new Set<string>();
  fail = false;
  delayMs = 5;
  async query<R>(name: string, _text: string, values: unknown[]): Promise<R[]> {
    this.statements.push({ name, values });
    await new Promise((r) => setTimeout(r, this.delayMs));
    if (this.fail) throw new Error('connection refused');
    if (name !== 'gw_commit_calls') return [];
    const [ids, calls] = values as [string[], number[]];
    return ids.flatMap((id, i) => {
      if (this.closed.has(id)) return [];
      const before = this.callCount.get(id) ?? 0;
      this.callCount.set(id, before + calls[i]);
      return [{ id, first_turn: before } as R];
    });
  }
}

class FakeBus {
  readonly publishes: EventEnvelope[][] = [];
  fail = false;
  async publish(events: EventEnvelope | readonly EventEnvelope[]): Promise<void> {
    await new Promise((r) => setTimeout(r, 5));
    if (this.fail) throw new Error('broker unavailable');
    this.publishes.push([events].flat());
  }
}

const row = (callId: string, sessionId: string) => ({ callId, sessionId }) as StoredCapture;
const request = (sessionId: string, callIds: string[]): CommitRequest => ({
  sessionId,
  calls: callIds.length,
  newBranches: 1,
  captures: callIds.map((id, turn) => ({ turn, row: row(id, sessionId) })),
  events: (first) => callIds.map((id, i) => ({ payload: { deployment: `${id}@${first + i}` } }) as unknown as EventEnvelope),
});

const setup = () => {
  const sql = new FakeSql();
  const bus = new FakeBus();
  const committer = new RecordCommitter(sql as unknown as SqlClient, bus as unknown as MessageBus);
  return { sql, bus, committer };
};

describe('RecordCommitter (group commit)', () => {
  it('commits calls that arrive while a batch is in flight together: one statement, one publish, turns numbered per session', async () => {
    const { sql, bus, committer } = setup();
    const first = committer.commit(request('s1', ['a']));
    await new Promise((r) => setTimeout(r, 1));
    const rest = [committer.commit(request('s1', ['b', 'c'])), committer.commit(request('s2', ['d'])), committer.commit(request('s1', ['e']))];
    expect(await first).toEqual({ firstTurn: 0 });
    expect(await Promise.all(rest)).toEqual([{ firstTurn: 1 }, { firstTurn: 0 }, { firstTurn: 3 }]);
    const commits = sql.statements.filter((s) => s.name === 'gw_commit_calls');
    expect(commits).toHaveLength(2);
    // The second statement: sessions aggregated, rows numbered by their offset within the session.
    expect(commits[1].values.slice(0, 3)).toEqual([['s1', 's2'], [3, 1], [2, 1]]);
    expect(commits[1].values[3]).toEqual(['b', 'c', 'd', 'e']);
    expect(commits[1].values[7]).toEqual([0, 1, 0, 2]);
    expect(bus.publishes.map((p) => p.length)).toEqual([1, 4]);
    expect(bus.publishes[1].map((e) => (e.payload as { deployment: string }).deployment)).toEqual(['b@1', 'c@2', 'd@0', 'e@3']);
    await committer.whenIdle();
    expect(committer.pending).toBe(0);
  });

  it('answers null for a session closed meanwhile and publishes nothing for it', async () => {
    const { sql, bus, committer } = setup();
    sql.closed.add('gone');
    const [a, b] = await Promise.all([committer.commit(request('gone', ['x'])), committer.commit(request('open', ['y']))]);
    expect(a).toBeNull();
    expect(b).toEqual({ firstTurn: 0 });
    expect(bus.publishes.flat().map((e) => (e.payload as { deployment: string }).deployment)).toEqual(['y@0']);
  });

  it('fails every call of a batch whose publish fails, and removes their capture rows', async () => {
    const { sql, bus, committer } = setup();
    bus.fail = true;
    const results = await Promise.allSettled([committer.commit(request('s1', ['a'])), committer.commit(request('s2', ['b']))]);
    for (const r of results) expect(r.status === 'rejected' && r.reason instanceof RecordNotDurableError).toBe(true);
    await committer.whenIdle();
    const forget = sql.statements.filter((s) => s.name === 'gw_capture_forget');
    expect(forget.flatMap((s) => s.values[0] as string[]).sort()).toEqual(['a', 'b']);
    // The next batch goes through once the broker is back.
    bus.fail = false;
    expect(await committer.commit(request('s1', ['c']))).toEqual({ firstTurn: 1 });
  });

  it('fails the batch without publishing when the database refuses the statement', async () => {
    const { sql, bus, committer } = setup();
    sql.fail = true;
    await expect(committer.commit(request('s1', ['a']))).rejects.toBeInstanceOf(RecordNotDurableError);
    expect(bus.publishes).toHaveLength(0);
  });
});
