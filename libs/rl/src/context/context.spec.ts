import { describe, expect, it } from 'vitest';
import { seededRandom } from '../random';
import { appendOnly, ContextInputError, contextManager, ContextManager, slidingWindow, splitTurns, summarizing } from './index';

interface Msg {
  role: string;
  content: string;
}

const m = (role: string, content: string): Msg => ({ role, content });

/** A random trajectory grown the way an agent loop grows it: optional system prompt, the task, then turns. */
function* growingHistory(seed: number, turns: number): Generator<Msg[]> {
  const rnd = seededRandom(seed);
  const h: Msg[] = [];
  if (rnd() < 0.7) h.push(m('system', 'sys'));
  h.push(m('user', `task-${seed}`));
  if (rnd() < 0.2) h.push(m('user', 'more task'));
  yield [...h];
  for (let t = 0; t < turns; t++) {
    h.push(m('assistant', `a${t}`));
    const answers = Math.floor(rnd() * 4);
    for (let k = 0; k < answers; k++) h.push(m(rnd() < 0.7 ? 'tool' : 'user', `r${t}.${k}`));
    yield [...h];
  }
}

const assistantCount = (ms: Msg[]) => ms.filter((x) => x.role === 'assistant').length;

describe('splitTurns', () => {
  it('head = everything before the first assistant; a turn = an assistant and what answers it', () => {
    const h = [
      m('system', 's'),
      m('user', 'task'),
      m('assistant', 'a'),
      m('tool', 't1'),
      m('tool', 't2'),
      m('assistant', 'b'),
      m('user', 'u'),
    ];
    const { head, turns } = splitTurns(h);
    expect(head).toEqual([h[0], h[1]]);
    expect(turns).toEqual([
      [h[2], h[3], h[4]],
      [h[5], h[6]],
    ]);
  });

  it('rejects an empty history, a missing task and bad roles, naming the field', () => {
    expect(() => splitTurns([])).toThrow(/history/);
    expect(() => splitTurns([m('system', 's'), m('assistant', 'a')])).toThrow(/no user message/);
    expect(() => splitTurns([m('user', 'x'), { content: 'y' } as Msg])).toThrow(/history\[1\]\.role/);
  });
});

describe('append-only (property: never rewrites)', () => {
  it('returns the whole history and rewritten = false on every call of 200 random trajectories', async () => {
    for (let seed = 0; seed < 200; seed++) {
      const cm = appendOnly<Msg>();
      for (const h of growingHistory(seed, 12)) {
        const v = await cm.view(h);
        expect(v.rewritten).toBe(false);
        expect(v.messages).toEqual(h);
      }
    }
  });
});

describe('sliding window (property: never more than k turns, never drops the task)', () => {
  it('120 random trajectories × k ∈ {1, 2, 3, 5}', async () => {
    for (let seed = 0; seed < 120; seed++)
      for (const k of [1, 2, 3, 5]) {
        const cm = slidingWindow<Msg>({ lastTurns: k });
        let prev: Msg[] | null = null;
        for (const h of growingHistory(seed, 10)) {
          const v = await cm.view(h);
          const { head, turns } = splitTurns(h);
          const vt = splitTurns(v.messages);
          expect(vt.turns.length).toBeLessThanOrEqual(k);
          expect(vt.head).toEqual(head); // system prompt and task kept
          expect(v.messages.some((x) => x.content === `task-${seed}`)).toBe(true);
          expect(vt.turns).toEqual(turns.slice(-k)); // exactly the last k turns
          // rewritten exactly when this view does not extend the previous one
          const extends_ = prev === null ? v.messages.length === h.length : prev.every((x, i) => v.messages[i] === x);
          expect(v.rewritten).toBe(!extends_);
          if (turns.length <= k) expect(v.rewritten).toBe(false);
          prev = v.messages;
        }
      }
  });

  it('hand example: k = 1 keeps the head and the last turn, and says it rewrote', async () => {
    const h = [m('system', 's'), m('user', 'task'), m('assistant', 'a'), m('tool', 't'), m('assistant', 'b'), m('tool', 'u')];
    const v = await slidingWindow<Msg>({ lastTurns: 1 }).view(h);
    expect(v.messages).toEqual([h[0], h[1], h[4], h[5]]);
    expect(v.rewritten).toBe(true);
  });

  it('validates lastTurns', () => {
    expect(() => slidingWindow({ lastTurns: 0 })).toThrow(/lastTurns/);
    expect(() => slidingWindow({ lastTurns: 1.5 })).toThrow(ContextInputError);
  });
});

describe('summarizing', () => {
  it('property: visible turns ≤ maxTurns, the head is kept, every turn is either visible or summarized', async () => {
    for (let seed = 0; seed < 100; seed++)
      for (const [maxTurns, keepLastTurns] of [
        [3, 1],
        [2, 2],
        [4, 0],
      ]) {
        const summarizedContents: string[] = [];
        const cm = summarizing<Msg>({
          maxTurns,
          keepLastTurns,
          summarize: async (dropped) => {
            for (const d of dropped) if (d.role !== 'summary') summarizedContents.push(d.content);
            return `S${summarizedContents.length}`;
          },
          makeSummaryMessage: (text) => m('summary', text),
        });
        let prev: Msg[] | null = null;
        for (const h of growingHistory(seed, 10)) {
          const calls = summarizedContents.length;
          const v = await cm.view(h);
          const { head, turns } = splitTurns(h);
          expect(v.messages.slice(0, head.length)).toEqual(head);
          expect(assistantCount(v.messages)).toBeLessThanOrEqual(maxTurns);
          // no message is lost: each turn message is visible or was handed to summarize
          const visible = new Set(v.messages.map((x) => x.content));
          for (const x of turns.flat()) expect(visible.has(x.content) || summarizedContents.includes(x.content)).toBe(true);
          const summarizedNow = summarizedContents.length !== calls;
          if (prev !== null) expect(v.rewritten).toBe(summarizedNow);
          prev = v.messages;
        }
      }
  });

  it('hand example: maxTurns 2, keepLastTurns 1; the previous summary is summarized again', async () => {
    const seen: Msg[][] = [];
    const cm = summarizing<Msg>({
      maxTurns: 2,
      keepLastTurns: 1,
      summarize: async (dropped) => (seen.push(dropped), `sum${seen.length}`),
    });
    const h = [m('user', 'task'), m('assistant', 'a'), m('tool', 'ta'), m('assistant', 'b'), m('tool', 'tb')];
    expect(await cm.view(h)).toEqual({ messages: h, rewritten: false });
    h.push(m('assistant', 'c'), m('tool', 'tc'));
    const v = await cm.view(h);
    expect(seen[0]).toEqual([h[1], h[2], h[3], h[4]]);
    expect(v.messages).toEqual([h[0], { role: 'user', content: 'sum1' }, h[5], h[6]]);
    expect(v.rewritten).toBe(true);
    h.push(m('assistant', 'd'));
    const w = await cm.view(h);
    expect(w.rewritten).toBe(false); // extends the previous view
    expect(w.messages).toEqual([h[0], { role: 'user', content: 'sum1' }, h[5], h[6], h[7]]);
    h.push(m('tool', 'td'), m('assistant', 'e'));
    const x = await cm.view(h);
    expect(seen[1]).toEqual([{ role: 'user', content: 'sum1' }, h[5], h[6], h[7], h[8]]);
    expect(x.messages).toEqual([h[0], { role: 'user', content: 'sum2' }, h[9]]);
  });

  it('a failing summarize propagates; bad options and shrinking histories are errors', async () => {
    const cm = summarizing<Msg>({ maxTurns: 1, keepLastTurns: 0, summarize: async () => Promise.reject(new Error('policy down')) });
    await expect(cm.view([m('user', 't'), m('assistant', 'a'), m('assistant', 'b')])).rejects.toThrow('policy down');
    expect(() => summarizing<Msg>({ maxTurns: 1, keepLastTurns: 2, summarize: async () => '' })).toThrow(/keepLastTurns/);
    expect(() => summarizing<Msg>({ maxTurns: 0, keepLastTurns: 0, summarize: async () => '' })).toThrow(/maxTurns/);
    const ok = summarizing<Msg>({ maxTurns: 5, keepLastTurns: 1, summarize: async () => 's' });
    await ok.view([m('user', 't'), m('assistant', 'a')]);
    await expect(ok.view([m('user', 't')])).rejects.toThrow(/fewer than the 2/);
    const bad = summarizing<Msg>({ maxTurns: 1, keepLastTurns: 0, summarize: async () => 42 as unknown as string });
    await expect(bad.view([m('user', 't'), m('assistant', 'a'), m('assistant', 'b')])).rejects.toThrow(/summarize/);
  });
});

describe('contextManager(spec)', () => {
  it('builds each kind from a declaration', async () => {
    const kinds: ContextManager<Msg>['kind'][] = [
      contextManager<Msg>({ kind: 'append_only' }).kind,
      contextManager<Msg>({ kind: 'sliding_window', lastTurns: 2 }).kind,
      contextManager<Msg>({ kind: 'summarize', maxTurns: 3, keepLastTurns: 1 }, { summarize: async () => 's' }).kind,
    ];
    expect(kinds).toEqual(['append_only', 'sliding_window', 'summarize']);
    const w = contextManager<Msg>({ kind: 'sliding_window', lastTurns: 1 });
    const v = await w.view([m('user', 't'), m('assistant', 'a'), m('assistant', 'b')]);
    expect(v.messages.map((x) => x.content)).toEqual(['t', 'b']);
  });

  it('names what is missing or wrong', () => {
    expect(() => contextManager<Msg>({ kind: 'summarize', maxTurns: 3, keepLastTurns: 1 })).toThrow(/deps\.summarize/);
    expect(() => contextManager<Msg>({ kind: 'window' } as never)).toThrow(/spec\.kind/);
    expect(() => contextManager<Msg>({ kind: 'sliding_window' } as never)).toThrow(/lastTurns/);
  });
});
