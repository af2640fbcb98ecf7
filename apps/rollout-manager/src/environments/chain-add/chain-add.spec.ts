import { describe, expect, it } from 'vitest';
import { ByteTokenizer, tinyChatFormat } from '@anvil/tokenizer';
import {
  ChainAddConfigError,
  ChainAddEnvironment,
  CHAIN_ADD_SYSTEM,
  chainAddTask,
  demonstration,
  executeAdd,
  verifyChainAdd,
} from './index';
import type { ChatMessage, Transcript } from '../types';

const transcript = (messages: ChatMessage[]): Transcript => {
  const last = [...messages].reverse().find((m) => m.role === 'assistant');
  return { messages, finalAnswer: last && !last.tool_calls?.length ? last.content : null };
};
const call = (id: string, a: unknown, b: unknown, name = 'add'): ChatMessage => ({
  role: 'assistant',
  content: null,
  tool_calls: [{ id, type: 'function', function: { name, arguments: JSON.stringify({ a, b }) } }],
});

describe('chain-add', () => {
  const task = chainAddTask([12, 7, 30]);

  it('has the contract messages and tool', () => {
    expect(task.messages).toEqual([
      { role: 'system', content: 'Add the numbers with the add tool, one pair at a time, then give the total.' },
      { role: 'user', content: '12+7+30' },
    ]);
    expect(CHAIN_ADD_SYSTEM.length).toBeLessThan(100);
    expect(task.tools.map((t) => t.function.name)).toEqual(['add']);
    expect(task.difficulty).toBe(3);
    expect(task.data).toEqual({ operands: [12, 7, 30], total: 49 });
    expect(new ChainAddEnvironment().limits(task)).toEqual({ maxSteps: 4 });
  });

  it('demonstration is the ideal trajectory and earns the full reward', () => {
    const demo = demonstration(task);
    expect(demo.map((m) => [m.role, m.content, m.tool_calls?.[0]?.function.arguments ?? null])).toEqual([
      ['system', CHAIN_ADD_SYSTEM, null],
      ['user', '12+7+30', null],
      ['assistant', null, '{"a": 12, "b": 7}'],
      ['tool', '19', null],
      ['assistant', null, '{"a": 19, "b": 30}'],
      ['tool', '49', null],
      ['assistant', '49', null],
    ]);
    expect(demo[3].tool_call_id).toBe(demo[2].tool_calls![0].id);
    const r = verifyChainAdd(task, transcript(demo));
    expect(r).toMatchObject({ outcomeReward: 1, success: true, processRewards: [1, 1, 1] });
    // Pure: the task is not mutated, a second call gives the same list.
    expect(demonstration(task)).toEqual(demo);
    expect(task.messages).toHaveLength(2);
  });

  it('demonstration renders through the tiny template as Hermes tool calls the byte tokenizer round-trips', () => {
    const fmt = tinyChatFormat();
    const text = fmt.template.render(demonstration(task) as never, { tools: task.tools as never });
    expect(text).toContain('<|im_start|>user\n12+7+30<|im_end|>\n');
    expect(text).toContain('<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 7}}\n</tool_call><|im_end|>\n');
    expect(text).toContain('<|im_start|>user\n<tool_response>\n19\n</tool_response><|im_end|>\n');
    expect(text.endsWith('<|im_start|>assistant\n49<|im_end|>\n')).toBe(true);
    const tok = new ByteTokenizer();
    const ids = tok.encode(text);
    expect(ids.every((id) => id >= 0 && id < 272)).toBe(true);
    expect(tok.decode(ids)).toBe(text);
  });

  it('partial credit: 0.8 for the total, 0.2 spread over the correct calls in order', () => {
    // right answer, no tool calls
    expect(verifyChainAdd(task, transcript([...task.messages, { role: 'assistant', content: '49' }]))).toMatchObject({
      outcomeReward: 0.8,
      success: true,
      processRewards: [1],
    });
    // first call right, second wrong, answer wrong
    const r = verifyChainAdd(
      task,
      transcript([
        ...task.messages,
        call('c0', 12, 7),
        { role: 'tool', tool_call_id: 'c0', content: '19' },
        call('c1', 19, 31),
        { role: 'tool', tool_call_id: 'c1', content: '50' },
        { role: 'assistant', content: '50' },
      ]),
    );
    expect(r.success).toBe(false);
    expect(r.outcomeReward).toBeCloseTo(0.1, 12);
    expect(r.processRewards).toEqual([1, 0, 0]);
    // argument order does not matter; a wrong call does not advance the chain; trailing '.' and spaces accepted
    const r2 = verifyChainAdd(
      task,
      transcript([...task.messages, call('c0', 7, 12), call('c1', 1, 2), call('c2', 30, 19), { role: 'assistant', content: ' 49.\n' }]),
    );
    expect(r2).toMatchObject({ outcomeReward: 1, success: true, processRewards: [1, 0, 1, 1] });
    // calls out of order (skipping the running total) earn nothing
    const r3 = verifyChainAdd(task, transcript([...task.messages, call('c0', 7, 30), { role: 'assistant', content: 'forty-nine' }]));
    expect(r3).toMatchObject({ outcomeReward: 0, success: false, processRewards: [0, 0] });
    // an answer followed by nothing else, but the last assistant turn is a tool call: no final answer
    const r4 = verifyChainAdd(task, transcript([...task.messages, call('c0', 12, 7), call('c1', 19, 30)]));
    expect(r4.outcomeReward).toBeCloseTo(0.2, 12);
    expect(r4.success).toBe(false);
    // extra correct-looking calls beyond k-1 do not count twice
    const r5 = verifyChainAdd(
      task,
      transcript([...task.messages, call('c0', 12, 7), call('c1', 19, 30), call('c2', 49, 0), { role: 'assistant', content: '49' }]),
    );
    expect(r5).toMatchObject({ outcomeReward: 1, processRewards: [1, 1, 0, 1] });
    // wrong tool name or non-integer args
    const r6 = verifyChainAdd(
      task,
      transcript([...task.messages, call('c0', 12, 7, 'sum'), call('c1', 12.5, 7), { role: 'assistant', content: null }]),
    );
    expect(r6).toMatchObject({ outcomeReward: 0, processRewards: [0, 0, 0] });
  });

  it('executes the add tool, errors as text', () => {
    expect(executeAdd({ name: 'add', arguments: '{"a": 12, "b": 7}' })).toEqual({ content: '19' });
    expect(executeAdd({ name: 'add', arguments: '{"a": -3, "b": 1}' })).toEqual({ content: '-2' });
    expect(executeAdd({ name: 'add', arguments: '{"a": "1", "b": 7}' }).content).toMatch(/^error: /);
    expect(executeAdd({ name: 'add', arguments: 'not json' }).content).toMatch(/^error: /);
    expect(executeAdd({ name: 'mul', arguments: '{"a": 1, "b": 7}' }).content).toBe('error: unknown tool mul');
  });

  it('seeded generator: deterministic, distinct, difficulty knob, disjoint train/eval', () => {
    const env = new ChainAddEnvironment({ k: { min: 2, max: 4 } });
    const a = env.generate({ seed: 7, count: 300, split: 'train' });
    const b = env.generate({ seed: 7, count: 300, split: 'train' });
    expect(a).toEqual(b);
    expect(new Set(a.map((t) => t.id)).size).toBe(300);
    expect(env.generate({ seed: 8, count: 300, split: 'train' }).map((t) => t.id)).not.toEqual(a.map((t) => t.id));
    expect(a.every((t) => t.split === 'train' && t.difficulty >= 2 && t.difficulty <= 4)).toBe(true);
    expect(new Set(a.map((t) => t.difficulty))).toEqual(new Set([2, 3, 4]));
    expect(a.every((t) => (t.data.operands as number[]).every((o) => o >= 0 && o <= 99))).toBe(true);
    const ev = env.generate({ seed: 7, count: 100, split: 'eval' });
    expect(ev.every((t) => t.split === 'eval')).toBe(true);
    const trainIds = new Set([...a, ...env.generate({ seed: 99, count: 2000, split: 'train' })].map((t) => t.id));
    expect(ev.some((t) => trainIds.has(t.id))).toBe(false);
    // the knob
    const k2 = new ChainAddEnvironment({ k: 2, maxOperand: 9 }).generate({ seed: 1, count: 50, split: 'train' });
    expect(k2.every((t) => t.difficulty === 2 && (t.data.operands as number[]).every((o) => o <= 9))).toBe(true);
    expect(k2[0].messages[1].content).toMatch(/^\d\+\d$/);
  });

  it('refuses bad knobs and impossible counts with the field named', () => {
    expect(() => new ChainAddEnvironment({ k: 5 })).toThrow(/k: must be/);
    expect(() => new ChainAddEnvironment({ k: { min: 3, max: 2 } })).toThrow(ChainAddConfigError);
    expect(() => new ChainAddEnvironment({ maxOperand: 0, evalFraction: 2 })).toThrow(/maxOperand.*evalFraction/);
    expect(() => new ChainAddEnvironment({ toolDelay: { kind: 'pareto', scaleMs: 1, alpha: -1, capMs: 10 } })).toThrow(/toolDelay.alpha/);
    // k=2 over 0..1: only 4 tasks exist in total
    expect(() => new ChainAddEnvironment({ k: 2, maxOperand: 1, evalFraction: 0 }).generate({ seed: 1, count: 5, split: 'train' })).toThrow(
      /count: only 4/,
    );
  });

  it('episodes serve the tool with the heavy-tailed delay knob', async () => {
    const env = new ChainAddEnvironment({ toolDelay: { kind: 'fixed', ms: 30 } });
    const ep = env.reset(task, { rolloutId: 'r1', seed: 1 });
    const t0 = performance.now();
    expect(await ep.executeTool({ callIndex: 0, id: 'c', name: 'add', arguments: '{"a":12,"b":7}' })).toEqual({ content: '19' });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(25);
    const ac = new AbortController();
    const slow = new ChainAddEnvironment({ toolDelay: { kind: 'fixed', ms: 10_000 } }).reset(task, {
      rolloutId: 'r2',
      seed: 1,
      signal: ac.signal,
    });
    const p = slow.executeTool({ callIndex: 0, id: 'c', name: 'add', arguments: '{"a":1,"b":2}' });
    ac.abort(new Error('timeout'));
    await expect(p).rejects.toThrow('timeout');
  });

  it('the compact prompt has no system message and names the tool only; tasks, split and verifier are the same', () => {
    const full = new ChainAddEnvironment({ k: 2, maxOperand: 9 }).generate({ seed: 3, count: 5, split: 'train' });
    const compact = new ChainAddEnvironment({ k: 2, maxOperand: 9, prompt: 'compact' }).generate({ seed: 3, count: 5, split: 'train' });
    expect(compact.map((t) => t.id)).toEqual(full.map((t) => t.id));
    for (const t of compact) {
      expect(t.messages).toEqual([{ role: 'user', content: t.id.slice('chain-add:'.length) }]);
      expect(t.tools).toEqual([{ type: 'function', function: { name: 'add' } }]);
      const demo = demonstration(t);
      expect(verifyChainAdd(t, { messages: demo, finalAnswer: demo[demo.length - 1].content })).toMatchObject({
        success: true,
        outcomeReward: 1,
      });
    }
    expect(() => new ChainAddEnvironment({ prompt: 'short' as never })).toThrow(/prompt: must be 'full' or 'compact'/);
  });
});
