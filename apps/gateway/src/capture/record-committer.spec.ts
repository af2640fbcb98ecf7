import { describe, expect, it } from 'vitest';
import { decodeEvent, encodeEvent, type EventEnvelope } from '@anvil/contracts';
import { sampleLlmCallEvent } from '@anvil/contracts/testing';
import type { MessageBus } from '@anvil/messaging';
import type { SqlClient } from '../db/sql-client';
import type { StoredCapture } from './capture-store';
import { OutboxRelay, type OutboxRelayOptions } from './outbox-relay';
import { RecordCommitter, RecordNotDurableError, type CommitRequest } from './record-committer';

interface OutboxRow {
  event_id: string;
  session_id: string;
  turn_index: number;
  frame: Buffer;
  prompt_from_capture: boolean;
  reused_prompt_tokens: number;
  created_at: number;
}

/**
 * A database that answers the gateway's statements the way PostgreSQL would (turn reservation
 * of open sessions, outbox inserts and deletes, the stale-row query), after `delayMs`.
 */
class FakeSql {
  readonly statements: { name: string; values: unknown[] }[] = [];
  readonly callCount = new Map<string, number>();
  readonly outbox = new Map<string, OutboxRow>();
  closed = new Set<string>();
  fail = false;
  delayMs = 5;
  async query<R>(name: string, _text: string, values: unknown[]): Promise<R[]> {
    this.statements.push({ name, values });
    await new Promise((r) => setTimeout(r, this.delayMs));
    if (this.fail) throw new Error('connection refused');
    if (name === 'gw_outbox_delete') {
      for (const id of values[0] as string[]) this.outbox.delete(id);
      return [];
    }
    if (name === 'gw_outbox_stale') {
      const [ageS, limit] = values as [number, number];
      return [...this.outbox.values()].filter((r) => r.created_at <= Date.now() - ageS * 1000).slice(0, limit) as R[];
    }
    if (name !== 'gw_commit_calls') return [];
    const [ids, calls] = values as [string[], number[]];
    const first = new Map<string, number>();
    const out = ids.flatMap((id, i) => {
      if (this.closed.has(id)) return [];
      const before = this.callCount.get(id) ?? 0;
      this.callCount.set(id, before + calls[i]);
      first.set(id, before);
      return [{ id, first_turn: before } as R];
    });
    const [eventIds, sessions, ks, frames, fromCapture, reused, deleted] = values.slice(17) as [
      string[],
      string[],
      number[],
      Buffer[],
      boolean[],
      number[],
      string[],
    ];
    eventIds.forEach((id, i) => {
      const f = first.get(sessions[i]);
      if (f !== undefined)
        this.outbox.set(id, {
          event_id: id,
          session_id: sessions[i],
          turn_index: f + ks[i],
          frame: frames[i],
          prompt_from_capture: fromCapture[i],
          reused_prompt_tokens: reused[i],
          created_at: Date.now(),
        });
    });
    for (const id of deleted) this.outbox.delete(id);
    return out;
  }
}

/** A broker whose publish can be held (a slow acks=all) or refused. */
class FakeBus {
  readonly publishes: EventEnvelope[][] = [];
  fail = false;
  private held: (() => void)[] = [];
  hold = false;
  async publish(events: EventEnvelope | readonly EventEnvelope[]): Promise<void> {
    await new Promise((r) => setTimeout(r, 2));
    if (this.hold) await new Promise<void>((r) => this.held.push(r));
    if (this.fail) throw new Error('broker unavailable');
    this.publishes.push([events].flat().map((e) => structuredClone(e)));
  }
  release(): void {
    this.hold = false;
    for (const r of this.held.splice(0)) r();
  }
  turns(): string[] {
    return this.publishes.flat().map((e) => `${e.id}@${(e as EventEnvelope<'llm_call.recorded'>).payload.turnIndex}`);
  }
}

const record = (id: string, turn: number): EventEnvelope<'llm_call.recorded'> => {
  const e = sampleLlmCallEvent({ promptTokens: 4, outputTokens: 2, turnIndex: turn });
  return { ...e, id, payload: { ...e.payload, callId: id } };
};
const row = (callId: string, sessionId: string) => ({ callId, sessionId }) as StoredCapture;
const request = (sessionId: string, callIds: string[]): CommitRequest => ({
  sessionId,
  calls: callIds.length,
  newBranches: 1,
  captures: callIds.map((id, turn) => ({ turn, row: row(id, sessionId) })),
  records: callIds.map((id, turn) => record(id, turn)),
});

const setup = (opts: OutboxRelayOptions = {}) => {
  const sql = new FakeSql();
  const bus = new FakeBus();
  const relay = new OutboxRelay(sql as unknown as SqlClient, bus as unknown as MessageBus, {
    retryMinMs: 5,
    retryMaxMs: 20,
    deleteDelayMs: 10,
    ...opts,
  });
  const committer = new RecordCommitter(sql as unknown as SqlClient, relay);
  return { sql, bus, relay, committer };
};

const until = async (cond: () => boolean, ms = 2_000) => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not reached');
    await new Promise((r) => setTimeout(r, 5));
  }
};

describe('RecordCommitter (group commit through the outbox)', () => {
  it('commits calls that arrive while a batch is in flight together: one statement, turns numbered per session, events published in order', async () => {
    const { sql, bus, relay, committer } = setup();
    const first = committer.commit(request('s1', ['a']));
    await new Promise((r) => setTimeout(r, 1));
    const rest = [
      committer.commit(request('s1', ['b', 'c'])),
      committer.commit(request('s2', ['d'])),
      committer.commit(request('s1', ['e'])),
    ];
    expect(await first).toEqual({ firstTurn: 0 });
    expect(await Promise.all(rest)).toEqual([{ firstTurn: 1 }, { firstTurn: 0 }, { firstTurn: 3 }]);
    const commits = sql.statements.filter((s) => s.name === 'gw_commit_calls');
    expect(commits).toHaveLength(2);
    // The second statement: sessions aggregated, rows and outbox events numbered by their offset within the session.
    expect(commits[1].values.slice(0, 3)).toEqual([
      ['s1', 's2'],
      [3, 1],
      [2, 1],
    ]);
    expect(commits[1].values[3]).toEqual(['b', 'c', 'd', 'e']);
    expect(commits[1].values[7]).toEqual([0, 1, 0, 2]);
    expect(commits[1].values[17]).toEqual(['b', 'c', 'd', 'e']);
    expect(commits[1].values[19]).toEqual([0, 1, 0, 2]);
    // The stored frames decode to the events, turn relative to their request (the row holds the absolute one).
    expect(
      (commits[1].values[20] as Buffer[]).map((f) => (decodeEvent(f) as EventEnvelope<'llm_call.recorded'>).payload.turnIndex),
    ).toEqual([0, 1, 0, 0]);
    await until(() => relay.backlog === 0 && bus.publishes.flat().length === 5);
    expect(bus.turns()).toEqual(['a@0', 'b@1', 'c@2', 'd@0', 'e@3']);
    // Published rows are deleted (here by the relay's own delete: no later statement came).
    await until(() => sql.outbox.size === 0);
    await committer.whenIdle();
    expect(committer.pending).toBe(0);
  });

  it('answers as soon as the statement commits, before the broker acknowledges; the next statement deletes the published rows', async () => {
    const { sql, bus, relay, committer } = setup({ deleteDelayMs: 10_000 });
    bus.hold = true;
    expect(await committer.commit(request('s1', ['a']))).toEqual({ firstTurn: 0 });
    expect(bus.publishes).toHaveLength(0);
    expect(sql.outbox.has('a')).toBe(true);
    expect(relay.backlog).toBe(1);
    bus.release();
    await until(() => bus.publishes.length === 1 && relay.backlog === 0);
    expect(sql.outbox.has('a')).toBe(true); // deleted with the next write, not by a statement of its own
    expect(await committer.commit(request('s1', ['b']))).toEqual({ firstTurn: 1 });
    const last = sql.statements.filter((s) => s.name === 'gw_commit_calls').at(-1);
    expect(last?.values[23]).toEqual(['a']);
    expect(sql.outbox.has('a')).toBe(false);
    expect(sql.statements.some((s) => s.name === 'gw_outbox_delete')).toBe(false);
  });

  it('answers null for a session closed meanwhile, and neither stores nor publishes its record', async () => {
    const { sql, bus, relay, committer } = setup();
    sql.closed.add('gone');
    const [a, b] = await Promise.all([committer.commit(request('gone', ['x'])), committer.commit(request('open', ['y']))]);
    expect(a).toBeNull();
    expect(b).toEqual({ firstTurn: 0 });
    await until(() => relay.backlog === 0 && bus.publishes.length > 0);
    expect(bus.turns()).toEqual(['y@0']);
    expect(sql.outbox.has('x')).toBe(false);
  });

  it('keeps answering through a broker outage: records wait in the outbox and are published, in order, once it is back', async () => {
    const warnings: string[] = [];
    const { sql, bus, relay, committer } = setup({ warn: (m) => warnings.push(m) });
    bus.fail = true;
    expect(await committer.commit(request('s1', ['a']))).toEqual({ firstTurn: 0 });
    expect(await committer.commit(request('s1', ['b']))).toEqual({ firstTurn: 1 });
    await new Promise((r) => setTimeout(r, 60));
    expect(bus.publishes).toHaveLength(0);
    expect(relay.backlog).toBe(2);
    expect([...sql.outbox.keys()].sort()).toEqual(['a', 'b']);
    expect(warnings[0]).toMatch(/stay in the outbox/);
    bus.fail = false;
    await until(() => relay.backlog === 0);
    expect(bus.turns()).toEqual(['a@0', 'b@1']);
    await until(() => sql.outbox.size === 0);
  });

  it('refuses the batch (not answered) when the database refuses the statement, and keeps the pending deletes for later', async () => {
    const { sql, bus, relay, committer } = setup({ deleteDelayMs: 10_000 });
    await committer.commit(request('s1', ['a']));
    await until(() => bus.publishes.length === 1);
    sql.fail = true;
    await expect(committer.commit(request('s1', ['b']))).rejects.toBeInstanceOf(RecordNotDurableError);
    expect(bus.turns()).toEqual(['a@0']);
    sql.fail = false;
    expect(relay.takePublished()).toEqual(['a']);
  });

  it('refuses a call whose record the contract rejects, before touching the database', async () => {
    const { sql, committer } = setup();
    const bad = request('s1', ['a']);
    (bad.records[0].payload as { outputLogprobs: Float32Array }).outputLogprobs = new Float32Array(5); // 2 output ids, 5 logprobs
    await expect(committer.commit(bad)).rejects.toThrow(/record is invalid/);
    expect(sql.statements).toHaveLength(0);
  });

  it('fails only the call with the invalid record; the others of its batch are written and numbered without it', async () => {
    const { sql, bus, relay, committer } = setup();
    const first = committer.commit(request('s0', ['z'])); // holds the writer, so the next three form one batch
    await new Promise((r) => setTimeout(r, 1));
    const bad = request('s1', ['a']);
    (bad.records[0].payload as { outputLogprobs: Float32Array }).outputLogprobs = new Float32Array(5);
    const results = await Promise.allSettled([
      committer.commit(request('s1', ['b'])),
      committer.commit(bad),
      committer.commit(request('s1', ['c'])),
    ]);
    await first;
    expect(results.map((r) => (r.status === 'fulfilled' ? r.value : 'rejected'))).toEqual([{ firstTurn: 0 }, 'rejected', { firstTurn: 1 }]);
    const batchStatement = sql.statements.filter((s) => s.name === 'gw_commit_calls')[1];
    expect(batchStatement.values[3]).toEqual(['b', 'c']);
    expect(batchStatement.values[17]).toEqual(['b', 'c']);
    expect(batchStatement.values[19]).toEqual([0, 1]);
    await until(() => relay.backlog === 0 && bus.publishes.flat().length === 3);
    expect(bus.turns()).toEqual(['z@0', 'b@0', 'c@1']);
  });
});

describe('OutboxRelay sweeper', () => {
  const stale = (sql: FakeSql, id: string, turn: number, session = 's9') => {
    sql.outbox.set(id, {
      event_id: id,
      session_id: session,
      turn_index: turn,
      frame: encodeEvent(record(id, 0)),
      prompt_from_capture: false,
      reused_prompt_tokens: 0,
      created_at: Date.now() - 60_000,
    });
  };

  it('publishes rows a stopped gateway left behind, with their reserved turns, then deletes them', async () => {
    const { sql, bus, relay } = setup();
    stale(sql, 'p', 4);
    stale(sql, 'q', 5);
    sql.outbox.set('young', {
      event_id: 'young',
      session_id: 's9',
      turn_index: 6,
      frame: encodeEvent(record('young', 0)),
      prompt_from_capture: false,
      reused_prompt_tokens: 0,
      created_at: Date.now(),
    });
    expect(await relay.sweep()).toBe(2);
    expect(bus.turns()).toEqual(['p@4', 'q@5']);
    expect([...sql.outbox.keys()]).toEqual(['young']);
  });

  it('stores a captured call without its prompt, and the sweeper rebuilds it from the capture row', async () => {
    const prompts = new Map<string, readonly number[]>();
    const { sql, bus } = setup({ staleAfterMs: 0 });
    const hung = { publish: () => new Promise<void>(() => undefined) } as unknown as MessageBus;
    const dying = new RecordCommitter(sql as unknown as SqlClient, new OutboxRelay(sql as unknown as SqlClient, hung));
    const req = request('s1', ['c1', 'c2']);
    req.records.forEach((e) => {
      // v2: the event carries the ids after the 3 reused ones; the capture row holds the whole prompt.
      e.payload.reusedPromptTokens = 3;
      e.payload.promptLength = 3 + e.payload.promptDeltaIds.length;
      prompts.set(e.id, [7, 7, 7, ...Array.from(e.payload.promptDeltaIds)]);
    });
    const noCapture = request('s1', ['plain']);
    (noCapture as { captures: CommitRequest['captures'] }).captures = [];
    await dying.commit(req);
    await dying.commit(noCapture);
    const rows = [...sql.outbox.values()];
    expect(rows.map((r) => [r.event_id, r.prompt_from_capture, r.reused_prompt_tokens])).toEqual([
      ['c1', true, 3],
      ['c2', true, 3],
      ['plain', false, 0],
    ]);
    expect(rows.map((r) => (decodeEvent(r.frame) as EventEnvelope<'llm_call.recorded'>).payload.promptDeltaIds.length)).toEqual([0, 0, 4]);
    const sweeper = new OutboxRelay(sql as unknown as SqlClient, bus as unknown as MessageBus, {
      staleAfterMs: 0,
      promptOf: async (id) => prompts.get(id) ?? null,
    });
    expect(await sweeper.sweep()).toBe(3);
    const out = bus.publishes.flat() as EventEnvelope<'llm_call.recorded'>[];
    expect(
      out.map((e) => [
        e.id,
        e.payload.turnIndex,
        Array.from(e.payload.promptDeltaIds),
        e.payload.reusedPromptTokens,
        e.payload.promptLength,
      ]),
    ).toEqual([
      ['c1', 0, prompts.get('c1')?.slice(3), 3, 7],
      ['c2', 1, prompts.get('c2')?.slice(3), 3, 7],
      ['plain', 2, Array.from(noCapture.records[0].payload.promptDeltaIds), 0, 4],
    ]);
  });

  it('leaves rows this gateway is still publishing to it, and an undecodable row in place', async () => {
    const warnings: string[] = [];
    const { sql, bus, relay, committer } = setup({ staleAfterMs: 0, warn: (m) => warnings.push(m) });
    bus.fail = true;
    await committer.commit(request('s1', ['mine']));
    sql.outbox.set('junk', {
      event_id: 'junk',
      session_id: 's9',
      turn_index: 0,
      frame: Buffer.from('not a frame'),
      prompt_from_capture: false,
      reused_prompt_tokens: 0,
      created_at: Date.now() - 60_000,
    });
    bus.fail = false;
    bus.hold = true; // the relay's own publish of `mine` is in flight while the sweep runs
    await new Promise((r) => setTimeout(r, 30));
    const swept = relay.sweep();
    await new Promise((r) => setTimeout(r, 20));
    bus.release();
    expect(await swept).toBe(0);
    expect(warnings.some((w) => /cannot be decoded/.test(w))).toBe(true);
    await until(() => relay.backlog === 0);
    expect(bus.turns()).toEqual(['mine@0']);
    expect(sql.outbox.has('junk')).toBe(true);
  });

  it('drain: publishes what is queued, and gives up at the deadline while the broker is down (rows stay for the next sweeper)', async () => {
    const { sql, bus, relay, committer } = setup();
    await committer.commit(request('s1', ['a']));
    expect(await relay.drain(1_000)).toBe(true);
    expect(sql.outbox.size).toBe(0);

    const second = setup();
    second.bus.fail = true;
    await second.committer.commit(request('s1', ['b']));
    expect(await second.relay.drain(50)).toBe(false);
    expect(second.sql.outbox.has('b')).toBe(true);
    expect(bus.turns()).toEqual(['a@0']);
  });
});
