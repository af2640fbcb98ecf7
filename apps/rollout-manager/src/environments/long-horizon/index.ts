/**
 * Built-in environment (b) "long-horizon": facts arrive one tool call at a time and must be
 * kept in the environment's key-value memory until a question at the end asks for a sum of
 * some of them. Many turns, a context that grows with every fact (so context managers matter),
 * heavy prefix sharing across a group, memory as a tool the environment serves, and — when the
 * task set offers `delegate` — a natural sub-task to hand to a sub-agent (look up and add).
 *
 *   system: "Fetch facts with next, store each with memory, then answer the question with the sum."
 *   user:   "Start."
 *   next() → "fact k1=57" · memory({"op":"set","key":"k1","value":"57"}) → "ok" · … ·
 *   next() → "question: k1+k3" · memory get k1 → "57" · memory get k3 → "23" · answer "80"
 *
 * Difficulty knob: n facts (1..256). Question: `q` of the keys (default 2, at most n).
 * Reward: 0.8 · [answer == sum] + 0.2 · (facts stored under their key with their value / n).
 * success = answer == sum. Process rewards per assistant turn: 1 when every tool call in it
 * succeeded (no "error:" result), an answer turn 1 when right.
 * Limits: 3n + 6 assistant turns. Tool delay: heavy-tailed knob (tool-delay.ts).
 */
import { seededRandom } from '@anvil/rl';
import { delaySampler, sleep, validateToolDelay, type ToolDelay } from '../tool-delay';
import type { ChatMessage, Environment, EnvTask, Episode, EpisodeContext, Split, ToolSpec, Transcript, VerifyResult } from '../types';

export const LONG_HORIZON_SYSTEM = 'Fetch facts with next, store each with memory, then answer the question with the sum.';

export const NEXT_TOOL: ToolSpec = {
  type: 'function',
  function: {
    name: 'next',
    description: 'Returns the next fact, or the question once all facts are out.',
    parameters: { type: 'object', properties: {} },
  },
};
export const ENV_MEMORY_TOOL: ToolSpec = {
  type: 'function',
  function: {
    name: 'memory',
    description: 'Key-value memory: {"op":"set","key":k,"value":v}, {"op":"get","key":k}, {"op":"list"}.',
    parameters: {
      type: 'object',
      properties: { op: { type: 'string', enum: ['get', 'set', 'list'] }, key: { type: 'string' }, value: { type: 'string' } },
      required: ['op'],
    },
  },
};

export interface LongHorizonConfig {
  /** Facts per task (the difficulty knob): one value or an inclusive range within 1..256. */
  facts: number | { min: number; max: number };
  /** Keys the question sums (≤ facts). */
  questionKeys: number;
  maxValue: number;
  evalFraction: number;
  toolDelay: ToolDelay;
}

export const LONG_HORIZON_DEFAULTS: LongHorizonConfig = {
  facts: { min: 4, max: 12 },
  questionKeys: 2,
  maxValue: 99,
  evalFraction: 0.1,
  toolDelay: { kind: 'none' },
};

export class LongHorizonConfigError extends Error {
  override readonly name = 'LongHorizonConfigError';
}

interface Data extends Record<string, unknown> {
  values: number[];
  question: number[];
  answer: number;
}

const range = (f: LongHorizonConfig['facts']) => (typeof f === 'number' ? { min: f, max: f } : f);

export function longHorizonConfig(input: Partial<LongHorizonConfig> = {}): LongHorizonConfig {
  const cfg = { ...LONG_HORIZON_DEFAULTS, ...input };
  const problems: string[] = [];
  const { min, max } = range(cfg.facts);
  if (!Number.isInteger(min) || !Number.isInteger(max) || min < 1 || max > 256 || min > max)
    problems.push(`facts: must be an integer (or range) within 1..256, got ${JSON.stringify(cfg.facts)}`);
  if (!Number.isInteger(cfg.questionKeys) || cfg.questionKeys < 1 || cfg.questionKeys > min)
    problems.push(`questionKeys: must be an integer in 1..${min} (the fewest facts), got ${String(cfg.questionKeys)}`);
  if (!Number.isInteger(cfg.maxValue) || cfg.maxValue < 1)
    problems.push(`maxValue: must be a positive integer, got ${String(cfg.maxValue)}`);
  if (!(cfg.evalFraction >= 0 && cfg.evalFraction <= 1)) problems.push(`evalFraction: must be in 0..1, got ${String(cfg.evalFraction)}`);
  try {
    validateToolDelay(cfg.toolDelay);
  } catch (err) {
    problems.push((err as Error).message);
  }
  if (problems.length) throw new LongHorizonConfigError(`long-horizon config: ${problems.join('; ')}`);
  return cfg;
}

const key = (i: number) => `k${i + 1}`;

function dataOf(task: EnvTask): Data {
  const d = task.data as Partial<Data>;
  if (!Array.isArray(d.values) || !Array.isArray(d.question) || d.values.length === 0)
    throw new LongHorizonConfigError(`task ${task.id}: data.values and data.question are required`);
  return { values: d.values, question: d.question, answer: d.question.reduce((s, i) => s + (d.values as number[])[i], 0) };
}

function hashSplit(s: string, evalFraction: number): Split {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return (h % 10_000) / 10_000 < evalFraction ? 'eval' : 'train';
}

export function longHorizonTask(values: number[], question: number[], evalFraction = LONG_HORIZON_DEFAULTS.evalFraction): EnvTask {
  const sig = `${values.join(',')}?${question.join(',')}`;
  return {
    id: `long-horizon:${values.length}:${fnv(sig)}`,
    env: 'long-horizon',
    messages: [
      { role: 'system', content: LONG_HORIZON_SYSTEM },
      { role: 'user', content: 'Start.' },
    ],
    tools: [NEXT_TOOL, ENV_MEMORY_TOOL],
    split: hashSplit(sig, evalFraction),
    difficulty: values.length,
    data: { values, question, answer: question.reduce((s, i) => s + values[i], 0) } satisfies Data,
  };
}

function fnv(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h.toString(16).padStart(8, '0');
}

const questionText = (q: number[]) => `question: ${q.map(key).join('+')}`;

/** Serves next and memory for one episode. */
class LongHorizonEpisode implements Episode {
  private cursor = 0;
  readonly memory = new Map<string, string>();
  private readonly delay: () => number;
  constructor(
    private readonly data: Data,
    toolDelay: ToolDelay,
    private readonly ctx: EpisodeContext,
  ) {
    this.delay = delaySampler(toolDelay, ctx.seed);
  }
  async executeTool(call: { name: string; arguments: string }) {
    await sleep(this.delay(), this.ctx.signal);
    if (call.name === 'next') {
      if (this.cursor < this.data.values.length) {
        const i = this.cursor++;
        return { content: `fact ${key(i)}=${this.data.values[i]}` };
      }
      return { content: questionText(this.data.question) };
    }
    if (call.name === 'memory') return { content: runMemory(this.memory, call.arguments) };
    return { content: `error: unknown tool ${call.name}` };
  }
}

function runMemory(map: Map<string, string>, args: string): string {
  let v: { op?: unknown; key?: unknown; value?: unknown };
  try {
    v = JSON.parse(args) as typeof v;
  } catch {
    return 'error: arguments must be JSON';
  }
  if (v.op === 'list') return JSON.stringify([...map.keys()]);
  if (typeof v.key !== 'string' || v.key === '') return 'error: key must be a non-empty string';
  if (v.op === 'get') return map.get(v.key) ?? 'not found';
  if (v.op === 'set') {
    if (typeof v.value !== 'string' && typeof v.value !== 'number') return 'error: value must be a string';
    if (map.size >= 1024 && !map.has(v.key)) return 'error: memory full';
    map.set(v.key, String(v.value));
    return 'ok';
  }
  return 'error: op must be get, set or list';
}

export function verifyLongHorizon(task: EnvTask, transcript: Transcript): VerifyResult {
  const d = dataOf(task);
  // Replays the memory writes of the transcript (what the agent stored, whatever the environment instance).
  const stored = new Map<string, string>();
  const results = new Map<string, string>();
  for (const m of transcript.messages) if (m.role === 'tool' && m.tool_call_id) results.set(m.tool_call_id, m.content ?? '');
  const processRewards: number[] = [];
  for (const m of transcript.messages) {
    if (m.role !== 'assistant') continue;
    const calls = m.tool_calls ?? [];
    if (calls.length === 0) {
      processRewards.push(Number((m.content ?? '').trim()) === d.answer ? 1 : 0);
      continue;
    }
    let ok = true;
    for (const c of calls) {
      if (c.function.name === 'memory') {
        try {
          const a = JSON.parse(c.function.arguments) as { op?: string; key?: string; value?: unknown };
          if (a.op === 'set' && typeof a.key === 'string') stored.set(a.key, String(a.value));
        } catch {
          /* scored by the result */
        }
      }
      if ((results.get(c.id) ?? 'error').startsWith('error')) ok = false;
    }
    processRewards.push(ok ? 1 : 0);
  }
  const kept = d.values.filter((v, i) => stored.get(key(i)) === String(v)).length;
  const answer = transcript.finalAnswer === null ? null : Number(transcript.finalAnswer.trim().replace(/\.$/, ''));
  const success = answer === d.answer;
  return {
    outcomeReward: 0.8 * (success ? 1 : 0) + (0.2 * kept) / d.values.length,
    success,
    processRewards,
    detail: `answer ${String(answer)} (expected ${d.answer}), ${kept}/${d.values.length} facts stored`,
  };
}

export function longHorizonDemonstration(task: EnvTask): ChatMessage[] {
  const d = dataOf(task);
  const out: ChatMessage[] = task.messages.map((m) => ({ ...m }));
  let n = 0;
  const call = (name: string, args: string, result: string) => {
    const id = `call_${n++}`;
    out.push({ role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name, arguments: args } }] });
    out.push({ role: 'tool', tool_call_id: id, content: result });
  };
  d.values.forEach((v, i) => {
    call('next', '{}', `fact ${key(i)}=${v}`);
    call('memory', `{"op": "set", "key": "${key(i)}", "value": "${v}"}`, 'ok');
  });
  call('next', '{}', questionText(d.question));
  for (const i of d.question) call('memory', `{"op": "get", "key": "${key(i)}"}`, String(d.values[i]));
  out.push({ role: 'assistant', content: String(d.answer) });
  return out;
}

export class LongHorizonEnvironment implements Environment<LongHorizonConfig> {
  readonly name = 'long-horizon';
  readonly config: LongHorizonConfig;
  constructor(config: Partial<LongHorizonConfig> = {}) {
    this.config = longHorizonConfig(config);
  }

  generate({ seed, count, split }: { seed: number; count: number; split: Split }): EnvTask[] {
    if (!Number.isInteger(count) || count < 0)
      throw new LongHorizonConfigError(`count: must be a non-negative integer, got ${String(count)}`);
    const { min, max } = range(this.config.facts);
    const rand = seededRandom((seed ^ (split === 'eval' ? 0x1ee7 : 0)) >>> 0);
    const out: EnvTask[] = [];
    const seen = new Set<string>();
    for (let i = 0; i < count * 200 + 10_000 && out.length < count; i++) {
      const n = min + Math.floor(rand() * (max - min + 1));
      const values = Array.from({ length: n }, () => Math.floor(rand() * (this.config.maxValue + 1)));
      const pool = Array.from({ length: n }, (_, j) => j);
      const question: number[] = [];
      for (let q = 0; q < this.config.questionKeys; q++) question.push(pool.splice(Math.floor(rand() * pool.length), 1)[0]);
      const t = longHorizonTask(
        values,
        question.sort((a, b) => a - b),
        this.config.evalFraction,
      );
      if (t.split !== split || seen.has(t.id)) continue;
      seen.add(t.id);
      out.push(t);
    }
    if (out.length < count) throw new LongHorizonConfigError(`count: only ${out.length} distinct ${split} tasks found; asked for ${count}`);
    return out;
  }

  limits(task: EnvTask) {
    return { maxSteps: 3 * dataOf(task).values.length + 6 };
  }

  reset(task: EnvTask, ctx: EpisodeContext): Episode {
    return new LongHorizonEpisode(dataOf(task), this.config.toolDelay, ctx);
  }

  verify(task: EnvTask, transcript: Transcript): VerifyResult {
    return verifyLongHorizon(task, transcript);
  }

  demonstration(task: EnvTask): ChatMessage[] {
    return longHorizonDemonstration(task);
  }
}
