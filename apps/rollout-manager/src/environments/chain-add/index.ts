/**
 * Built-in environment (a) "chain-add": a short multi-turn tool task the built-in tiny model
 * (byte-level, vocab 272, Qwen-style template) can learn on two CPU cores.
 *
 *   system: "Add the numbers with the add tool, one pair at a time, then give the total."
 *   user:   "12+7+30"
 *   assistant add(12, 7) → tool "19" → assistant add(19, 30) → tool "49" → assistant "49"
 *
 * Difficulty knob: k, the number of operands (2..4). Operands are 0..maxOperand (default 99).
 * The generator is seeded; train and eval are disjoint by construction (a task's split is a
 * hash of its operands, so no eval task is ever a train task whatever the counts or seeds).
 *
 * Reward (partial credit):
 *   outcome = 0.8 · [final answer == true total] + 0.2 · (correct tool calls in order / (k − 1))
 *   success = final answer == true total
 * A tool call is correct when it is the correct NEXT call: add(running total, next operand),
 * either argument order (addition commutes). A wrong call does not advance the chain (the next
 * correct call is still the same one). The final answer is the content of the last assistant
 * message without tool calls, trimmed, an optional trailing '.' removed, an integer literal.
 * Process rewards, one per assistant turn (LLM call) in call order: a turn with tool calls gets
 * 1 when every call in it is the correct next call, else 0; a turn without tool calls (an
 * answer) gets 1 when it states the true total, else 0.
 *
 * Limits: k + 1 assistant turns (then the rollout ends as max_steps). Tool delay: heavy-tailed
 * knob (tool-delay.ts), default none.
 */
import { seededRandom } from '@anvil/rl';
import { delaySampler, sleep, validateToolDelay, type ToolDelay } from '../tool-delay';
import type {
  ChatMessage,
  Environment,
  EnvTask,
  Episode,
  EpisodeContext,
  Split,
  ToolInvocation,
  ToolResult,
  ToolSpec,
  Transcript,
  VerifyResult,
} from '../types';

export const CHAIN_ADD_SYSTEM = 'Add the numbers with the add tool, one pair at a time, then give the total.';

export const ADD_TOOL: ToolSpec = {
  type: 'function',
  function: {
    name: 'add',
    description: 'Adds two integers.',
    parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] },
  },
};

/** The add tool as the compact prompt declares it: its name only (the demonstrations teach the arguments). */
export const ADD_TOOL_COMPACT: ToolSpec = { type: 'function', function: { name: 'add' } };

export interface ChainAddConfig {
  /**
   * 'full': a system instruction and the add tool's full JSON schema; 'compact': no system message
   * and the tool's name only. The built-in tiny model learns from scratch, and every fixed prompt
   * token dilutes its attention to the operands it must copy: its warm start needs about half the
   * steps with the compact prompt (the main job uses it).
   */
  prompt: 'full' | 'compact';
  /** Operand count k (the difficulty knob): one value or an inclusive range, each in 2..4. */
  k: number | { min: number; max: number };
  /** Operands are drawn uniformly from 0..maxOperand. */
  maxOperand: number;
  /** Share of the task space that is the eval split (0..1). */
  evalFraction: number;
  toolDelay: ToolDelay;
}

export const CHAIN_ADD_DEFAULTS: ChainAddConfig = {
  prompt: 'full',
  k: { min: 2, max: 4 },
  maxOperand: 99,
  evalFraction: 0.1,
  toolDelay: { kind: 'none' },
};

export class ChainAddConfigError extends Error {
  override readonly name = 'ChainAddConfigError';
}

export interface ChainAddData extends Record<string, unknown> {
  operands: number[];
  total: number;
}

function kRange(k: ChainAddConfig['k']): { min: number; max: number } {
  return typeof k === 'number' ? { min: k, max: k } : k;
}

export function chainAddConfig(input: Partial<ChainAddConfig> = {}): ChainAddConfig {
  const cfg: ChainAddConfig = { ...CHAIN_ADD_DEFAULTS, ...input };
  const problems: string[] = [];
  const { min, max } = kRange(cfg.k);
  if (!Number.isInteger(min) || !Number.isInteger(max) || min < 2 || max > 4 || min > max)
    problems.push(`k: must be an integer (or range) within 2..4, got ${JSON.stringify(cfg.k)}`);
  if (!Number.isInteger(cfg.maxOperand) || cfg.maxOperand < 1 || cfg.maxOperand > 1_000_000)
    problems.push(`maxOperand: must be an integer in 1..1000000, got ${String(cfg.maxOperand)}`);
  if (cfg.prompt !== 'full' && cfg.prompt !== 'compact')
    problems.push(`prompt: must be 'full' or 'compact', got ${JSON.stringify(cfg.prompt)}`);
  if (typeof cfg.evalFraction !== 'number' || !(cfg.evalFraction >= 0 && cfg.evalFraction <= 1))
    problems.push(`evalFraction: must be in 0..1, got ${String(cfg.evalFraction)}`);
  try {
    validateToolDelay(cfg.toolDelay);
  } catch (err) {
    problems.push((err as Error).message);
  }
  if (problems.length) throw new ChainAddConfigError(`chain-add config: ${problems.join('; ')}`);
  return cfg;
}

/** FNV-1a of the operand text: the split of a task depends on its content only. */
function splitOf(operands: number[], evalFraction: number): Split {
  let h = 0x811c9dc5;
  const s = operands.join('+');
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return (h % 10_000) / 10_000 < evalFraction ? 'eval' : 'train';
}

export function chainAddTask(
  operands: number[],
  evalFraction = CHAIN_ADD_DEFAULTS.evalFraction,
  prompt: ChainAddConfig['prompt'] = 'full',
): EnvTask {
  const total = operands.reduce((a, b) => a + b, 0);
  const text = operands.join('+');
  return {
    id: `chain-add:${text}`,
    env: 'chain-add',
    messages:
      prompt === 'full'
        ? [
            { role: 'system', content: CHAIN_ADD_SYSTEM },
            { role: 'user', content: text },
          ]
        : [{ role: 'user', content: text }],
    tools: [prompt === 'full' ? ADD_TOOL : ADD_TOOL_COMPACT],
    split: splitOf(operands, evalFraction),
    difficulty: operands.length,
    data: { operands, total } satisfies ChainAddData,
  };
}

function dataOf(task: EnvTask): ChainAddData {
  const ops = task.data.operands;
  if (!Array.isArray(ops) || ops.length < 2 || !ops.every((o) => Number.isInteger(o)))
    throw new ChainAddConfigError(`task ${task.id}: data.operands must be ≥ 2 integers`);
  return { operands: ops as number[], total: (ops as number[]).reduce((a, b) => a + b, 0) };
}

/** Integer arguments {a, b} of an add call, or null. */
function addArgs(text: string): { a: number; b: number } | null {
  try {
    const v = JSON.parse(text) as { a?: unknown; b?: unknown } | null;
    if (v && typeof v === 'object' && Number.isInteger(v.a) && Number.isInteger(v.b)) return { a: v.a as number, b: v.b as number };
  } catch {
    /* not JSON */
  }
  return null;
}

/** The final answer as an integer, or null when it is not one. */
export function parseAnswer(text: string | null): number | null {
  if (text === null) return null;
  const t = text.trim().replace(/\.$/, '');
  return /^-?\d+$/.test(t) ? Number(t) : null;
}

export function lastAnswer(messages: readonly ChatMessage[]): string | null {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (m.role === 'assistant') return m.tool_calls && m.tool_calls.length > 0 ? null : m.content;
  }
  return null;
}

/** The programmatic verifier (see the file header for the reward). */
export function verifyChainAdd(task: EnvTask, transcript: Transcript): VerifyResult {
  const { operands, total } = dataOf(task);
  const k = operands.length;
  let next = 1;
  let acc = operands[0];
  let correct = 0;
  const processRewards: number[] = [];
  for (const m of transcript.messages) {
    if (m.role !== 'assistant') continue;
    const calls = m.tool_calls ?? [];
    if (calls.length === 0) {
      processRewards.push(parseAnswer(m.content) === total ? 1 : 0);
      continue;
    }
    let all = true;
    for (const c of calls) {
      const args = c.function.name === 'add' ? addArgs(c.function.arguments) : null;
      const ok =
        args !== null && next < k && ((args.a === acc && args.b === operands[next]) || (args.a === operands[next] && args.b === acc));
      if (ok) {
        acc += operands[next];
        next++;
        correct++;
      } else all = false;
    }
    processRewards.push(all ? 1 : 0);
  }
  const answer = parseAnswer(transcript.finalAnswer);
  const success = answer === total;
  const outcomeReward = 0.8 * (success ? 1 : 0) + (0.2 * correct) / (k - 1);
  return {
    outcomeReward,
    success,
    processRewards,
    detail: `answer ${answer ?? 'none'} (total ${total}), ${correct}/${k - 1} correct calls`,
  };
}

/** The ideal message list for a task (opening messages included): the warm start's SFT data. */
export function chainAddDemonstration(task: EnvTask): ChatMessage[] {
  const { operands, total } = dataOf(task);
  const out: ChatMessage[] = task.messages.map((m) => ({ ...m }));
  let acc = operands[0];
  for (let j = 1; j < operands.length; j++) {
    const id = `call_${j - 1}`;
    out.push({
      role: 'assistant',
      content: null,
      tool_calls: [{ id, type: 'function', function: { name: 'add', arguments: `{"a": ${acc}, "b": ${operands[j]}}` } }],
    });
    acc += operands[j];
    out.push({ role: 'tool', tool_call_id: id, content: String(acc) });
  }
  out.push({ role: 'assistant', content: String(total) });
  return out;
}

/** Executes the add tool: the decimal sum of integer a and b; bad calls get an error text (the agent's mistake, not the environment's). */
export function executeAdd(call: Pick<ToolInvocation, 'name' | 'arguments'>): ToolResult {
  if (call.name !== 'add') return { content: `error: unknown tool ${call.name}` };
  const args = addArgs(call.arguments);
  if (!args) return { content: 'error: add needs integer arguments a and b' };
  return { content: String(args.a + args.b) };
}

export class ChainAddEnvironment implements Environment<ChainAddConfig> {
  readonly name = 'chain-add';
  readonly config: ChainAddConfig;

  constructor(config: Partial<ChainAddConfig> = {}) {
    this.config = chainAddConfig(config);
  }

  /**
   * `count` distinct tasks of `split`, deterministic in (seed, split, config). Throws when the
   * task space (k range × operand range, that split) holds fewer than `count` tasks.
   */
  generate({ seed, count, split }: { seed: number; count: number; split: Split }): EnvTask[] {
    if (!Number.isInteger(count) || count < 0) throw new ChainAddConfigError(`count: must be a non-negative integer, got ${String(count)}`);
    if (split !== 'train' && split !== 'eval') throw new ChainAddConfigError(`split: must be train or eval, got ${JSON.stringify(split)}`);
    const { min, max } = kRange(this.config.k);
    const rand = seededRandom((seed ^ (split === 'eval' ? 0x5eed_e7a1 : 0)) >>> 0);
    const seen = new Set<string>();
    const out: EnvTask[] = [];
    const attempts = count * 200 + 10_000;
    for (let i = 0; i < attempts && out.length < count; i++) {
      const k = min + Math.floor(rand() * (max - min + 1));
      const ops = Array.from({ length: k }, () => Math.floor(rand() * (this.config.maxOperand + 1)));
      if (splitOf(ops, this.config.evalFraction) !== split) continue;
      const task = chainAddTask(ops, this.config.evalFraction, this.config.prompt);
      if (seen.has(task.id)) continue;
      seen.add(task.id);
      out.push(task);
    }
    if (out.length < count)
      throw new ChainAddConfigError(
        `count: only ${out.length} distinct ${split} tasks found for k ${min}..${max}, maxOperand ${this.config.maxOperand}; asked for ${count}`,
      );
    return out;
  }

  limits(task: EnvTask) {
    return { maxSteps: dataOf(task).operands.length + 1 };
  }

  reset(task: EnvTask, ctx: EpisodeContext): Episode {
    dataOf(task);
    const delay = delaySampler(this.config.toolDelay, ctx.seed);
    return {
      executeTool: async (call) => {
        await sleep(delay(), ctx.signal);
        return executeAdd(call);
      },
    };
  }

  verify(task: EnvTask, transcript: Transcript): VerifyResult {
    return verifyChainAdd(task, transcript);
  }

  demonstration(task: EnvTask): ChatMessage[] {
    return chainAddDemonstration(task);
  }
}

/** The pure demonstration for a task (no environment instance needed). */
export const demonstration = chainAddDemonstration;
