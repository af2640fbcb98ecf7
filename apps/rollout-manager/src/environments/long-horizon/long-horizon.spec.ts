import { describe, expect, it } from 'vitest';
import { LongHorizonEnvironment, longHorizonTask, verifyLongHorizon } from './index';
import type { ChatMessage } from '../types';

const tr = (messages: ChatMessage[]) => {
  const last = [...messages].reverse().find((m) => m.role === 'assistant');
  return { messages, finalAnswer: last && !last.tool_calls?.length ? last.content : null };
};

describe('long-horizon', () => {
  const task = longHorizonTask([57, 4, 23], [0, 2]);

  it('the demonstration, replayed against an episode, is what the environment answers and earns the full reward', async () => {
    const env = new LongHorizonEnvironment({ facts: 3 });
    const demo = env.demonstration(task);
    const ep = env.reset(task, { rolloutId: 'r', seed: 1 });
    for (let i = 0; i < demo.length; i++) {
      const m = demo[i];
      if (m.role !== 'assistant' || !m.tool_calls) continue;
      const got = await ep.executeTool({
        callIndex: 0,
        id: m.tool_calls[0].id,
        name: m.tool_calls[0].function.name,
        arguments: m.tool_calls[0].function.arguments,
      });
      expect(got.content).toBe(demo[i + 1].content);
    }
    expect(demo.at(-1)).toEqual({ role: 'assistant', content: '80' });
    expect(env.verify(task, tr(demo))).toMatchObject({ outcomeReward: 1, success: true });
    expect(env.verify(task, tr(demo)).processRewards!.every((p) => p === 1)).toBe(true);
    expect(env.limits(task)).toEqual({ maxSteps: 15 });
  });

  it('partial credit for stored facts, none for a wrong answer; errors cost the process reward', () => {
    const msgs: ChatMessage[] = [
      ...task.messages,
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'a', type: 'function', function: { name: 'memory', arguments: '{"op":"set","key":"k1","value":"57"}' } }],
      },
      { role: 'tool', tool_call_id: 'a', content: 'ok' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'b', type: 'function', function: { name: 'memory', arguments: 'nope' } }] },
      { role: 'tool', tool_call_id: 'b', content: 'error: arguments must be JSON' },
      { role: 'assistant', content: '81' },
    ];
    const r = verifyLongHorizon(task, tr(msgs));
    expect(r.success).toBe(false);
    expect(r.outcomeReward).toBeCloseTo(0.2 / 3, 12);
    expect(r.processRewards).toEqual([1, 0, 0]);
  });

  it('seeded generator with the facts knob and disjoint splits; bad knobs named', () => {
    const env = new LongHorizonEnvironment({ facts: { min: 20, max: 40 }, questionKeys: 3 });
    const a = env.generate({ seed: 3, count: 50, split: 'train' });
    expect(a).toEqual(env.generate({ seed: 3, count: 50, split: 'train' }));
    expect(a.every((t) => t.difficulty >= 20 && t.difficulty <= 40 && (t.data.question as number[]).length === 3)).toBe(true);
    const ev = env.generate({ seed: 3, count: 10, split: 'eval' });
    expect(ev.every((t) => t.split === 'eval' && !a.some((x) => x.id === t.id))).toBe(true);
    expect(() => new LongHorizonEnvironment({ facts: 0 })).toThrow(/facts: must be/);
    expect(() => new LongHorizonEnvironment({ facts: 2, questionKeys: 3 })).toThrow(/questionKeys/);
  });

  it('memory is served per episode by the environment', async () => {
    const env = new LongHorizonEnvironment();
    const e1 = env.reset(task, { rolloutId: 'r1', seed: 1 });
    const e2 = env.reset(task, { rolloutId: 'r2', seed: 2 });
    expect((await e1.executeTool({ callIndex: 0, id: 'x', name: 'memory', arguments: '{"op":"set","key":"a","value":"1"}' })).content).toBe(
      'ok',
    );
    expect((await e1.executeTool({ callIndex: 0, id: 'x', name: 'memory', arguments: '{"op":"get","key":"a"}' })).content).toBe('1');
    expect((await e2.executeTool({ callIndex: 0, id: 'x', name: 'memory', arguments: '{"op":"get","key":"a"}' })).content).toBe(
      'not found',
    );
  });
});
