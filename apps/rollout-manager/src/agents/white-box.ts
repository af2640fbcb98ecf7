import { appendOnly, slidingWindow, summarizing, type ContextManager } from '@anvil/rl';
import { EnvironmentError, type ChatMessage, type Episode, type ToolSpec } from '../environments/types';
import { GatewayError, type ChatCompletion, type GatewayClient } from '../gateway-client';
import type { ContextSpec } from '../tasks/task-set';
import type { CallsRefused } from '@anvil/contracts';

export type LoopFinish = 'completed' | 'max_steps' | 'max_context' | 'timeout' | 'aborted';

export interface LoopResult {
  finish: LoopFinish;
  /** The whole conversation (what the environment saw), not the context manager's view. */
  messages: ChatMessage[];
  finalAnswer: string | null;
  /** Assistant turns of the main loop. */
  steps: number;
  /** Every LLM call made through the session (main loop, summaries, sub-agents), in order. */
  callIds: string[];
  /** Call ids of the main loop's assistant turns (the ones process rewards attach to). */
  stepCallIds: (string | null)[];
  /** The exact message lists sent, per call (tests compare them with what the gateway recorded). */
  sent: {
    purpose: 'step' | 'summary' | 'subagent';
    messages: ChatMessage[];
    tools: ToolSpec[];
    rewritten: boolean;
    callId: string | null;
    capture: string | null;
  }[];
  subAgentRuns: number;
  /** Calls the session's call limits refused: over its budget (the loop then ends as max_steps), over its rate (waited out). */
  callsRefused: CallsRefused;
  error?: string;
}

export const MEMORY_TOOL: ToolSpec = {
  type: 'function',
  function: {
    name: 'memory',
    description: 'Key-value memory: {"op":"set","key":k,"value":v} stores, {"op":"get","key":k} reads, {"op":"list"} lists keys.',
    parameters: {
      type: 'object',
      properties: { op: { type: 'string', enum: ['get', 'set', 'list'] }, key: { type: 'string' }, value: { type: 'string' } },
      required: ['op'],
    },
  },
};

export const DELEGATE_TOOL: ToolSpec = {
  type: 'function',
  function: {
    name: 'delegate',
    description: 'Hands a sub-task to a sub-agent that has the same tools; returns its answer.',
    parameters: { type: 'object', properties: { task: { type: 'string' } }, required: ['task'] },
  },
};

/** The memory tool the environment serves (one store per rollout; sub-agents share it). */
export class MemoryStore {
  private readonly map = new Map<string, string>();
  constructor(private readonly maxEntries = 256) {}
  run(args: string): string {
    let v: { op?: unknown; key?: unknown; value?: unknown };
    try {
      v = JSON.parse(args) as typeof v;
    } catch {
      return 'error: arguments must be JSON';
    }
    if (v.op === 'list') return JSON.stringify([...this.map.keys()]);
    if (typeof v.key !== 'string' || v.key.length === 0 || v.key.length > 128) return 'error: key must be a non-empty string (≤ 128)';
    if (v.op === 'get') return this.map.get(v.key) ?? 'not found';
    if (v.op === 'set') {
      if (typeof v.value !== 'string' || v.value.length > 4096) return 'error: value must be a string (≤ 4096)';
      if (!this.map.has(v.key) && this.map.size >= this.maxEntries) return 'error: memory full';
      this.map.set(v.key, v.value);
      return 'ok';
    }
    return 'error: op must be get, set or list';
  }
  get size(): number {
    return this.map.size;
  }
}

export interface LoopDeps {
  gateway: GatewayClient;
  baseUrl: string;
  episode: Episode;
  signal: AbortSignal;
}

export interface LoopOptions {
  opening: ChatMessage[];
  tools: ToolSpec[];
  context: ContextSpec;
  maxSteps: number;
  maxContextTokens?: number;
  temperature: number;
  maxTokens: number;
  builtinTools: ('memory' | 'delegate')[];
  /** Seed of the first call (call i uses seed + i) so reruns are reproducible. */
  seed?: number;
  /** Sub-agent limits. */
  subAgentMaxSteps?: number;
  memory?: MemoryStore;
}

export const SUMMARY_SYSTEM = 'Summarise the conversation so far in a few words. Keep every number.';

function transcriptText(messages: readonly ChatMessage[]): string {
  return messages
    .map((m) => {
      if (m.role === 'assistant' && m.tool_calls?.length)
        return `assistant: ${m.tool_calls.map((c) => `${c.function.name}(${c.function.arguments})`).join(' ')}`;
      return `${m.role}: ${m.content ?? ''}`;
    })
    .join('\n');
}

/** The context manager a task set declares; the summariser calls the policy through the same session. */
export function buildContextManager(
  spec: ContextSpec,
  summarize: (dropped: ChatMessage[]) => Promise<string>,
): ContextManager<ChatMessage> {
  switch (spec.kind) {
    case 'append_only':
      return appendOnly<ChatMessage>();
    case 'sliding_window':
      return slidingWindow<ChatMessage>({ lastTurns: spec.lastTurns });
    case 'summarize':
      return summarizing<ChatMessage>({
        summarize,
        maxTurns: spec.maxTurns,
        keepLastTurns: spec.keepLastTurns,
        makeSummaryMessage: (text) => ({ role: 'user', content: `Summary of earlier turns: ${text}` }),
      });
  }
}

class Finished extends Error {
  constructor(readonly finish: LoopFinish) {
    super(finish);
  }
}

/**
 * The white-box agent loop: reset → policy call (through the gateway session, context
 * manager applied) → tool execution (environment, memory, delegation) → … until the policy
 * answers without a tool call or a limit is hit.
 */
export async function runWhiteBoxLoop(deps: LoopDeps, opts: LoopOptions): Promise<LoopResult> {
  const { gateway, baseUrl, episode, signal } = deps;
  const memory = opts.memory ?? new MemoryStore();
  const history: ChatMessage[] = opts.opening.map((m) => ({ ...m }));
  const result: LoopResult = {
    finish: 'completed',
    messages: history,
    finalAnswer: null,
    steps: 0,
    callIds: [],
    stepCallIds: [],
    sent: [],
    subAgentRuns: 0,
    callsRefused: { budget: 0, rate: 0 },
  };
  const tools = [
    ...opts.tools,
    ...(opts.builtinTools.includes('memory') ? [MEMORY_TOOL] : []),
    ...(opts.builtinTools.includes('delegate') ? [DELEGATE_TOOL] : []),
  ];
  let seed = opts.seed;

  const call = async (
    purpose: 'step' | 'summary' | 'subagent',
    messages: ChatMessage[],
    withTools: ToolSpec[],
    rewritten: boolean,
    maxTokens: number,
  ): Promise<ChatCompletion> => {
    if (signal.aborted) throw new Finished(signal.reason === 'timeout' ? 'timeout' : 'aborted');
    let completion: ChatCompletion | undefined;
    for (let attempt = 0; !completion; attempt++) {
      try {
        completion = await gateway.chat(
          baseUrl,
          { messages, tools: withTools, maxTokens, temperature: opts.temperature, seed: seed === undefined ? undefined : seed++ },
          signal,
        );
      } catch (err) {
        if (signal.aborted) throw new Finished(signal.reason === 'timeout' ? 'timeout' : 'aborted');
        if (err instanceof GatewayError && err.status === 400 && err.code === 'context_length_exceeded') throw new Finished('max_context');
        // The session's call budget is spent: no call will be answered any more.
        if (err instanceof GatewayError && err.status === 429 && err.code === 'insufficient_quota') {
          result.callsRefused.budget++;
          throw new Finished('max_steps');
        }
        if (err instanceof GatewayError && err.status === 429 && err.code === 'rate_limit_exceeded') result.callsRefused.rate++;
        // 429 (staleness backstop on a first call, or the session's rate limit): wait as told, bounded.
        if (err instanceof GatewayError && err.status === 429 && attempt < 30) {
          await new Promise((r) => setTimeout(r, Math.min(5000, err.retryAfterMs ?? 500)));
          continue;
        }
        if (err instanceof GatewayError && err.status === 410) throw new Finished('aborted');
        throw err;
      }
    }
    result.callIds.push(completion.callId ?? '');
    result.sent.push({ purpose, messages, tools: withTools, rewritten, callId: completion.callId, capture: completion.capture });
    if (opts.maxContextTokens !== undefined && completion.promptTokens + completion.completionTokens >= opts.maxContextTokens) {
      if (purpose === 'step') {
        history.push(completion.message);
        result.steps++;
        result.stepCallIds.push(completion.callId);
      }
      throw new Finished('max_context');
    }
    return completion;
  };

  const summarize = async (dropped: ChatMessage[]): Promise<string> => {
    const c = await call(
      'summary',
      [
        { role: 'system', content: SUMMARY_SYSTEM },
        { role: 'user', content: transcriptText(dropped) },
      ],
      [],
      false,
      64,
    );
    return (c.message.content ?? '').trim() || '(nothing)';
  };
  const cm = buildContextManager(opts.context, summarize);

  const runTool = async (name: string, args: string, id: string, index: number, depth: number): Promise<string> => {
    if (name === 'memory' && opts.builtinTools.includes('memory')) return memory.run(args);
    if (name === 'delegate' && opts.builtinTools.includes('delegate')) {
      if (depth > 0) return 'error: sub-agents cannot delegate';
      let task: unknown;
      try {
        task = (JSON.parse(args) as { task?: unknown }).task;
      } catch {
        return 'error: arguments must be JSON';
      }
      if (typeof task !== 'string' || task.length === 0) return 'error: task must be a non-empty string';
      result.subAgentRuns++;
      return subAgent(task);
    }
    try {
      return (await episode.executeTool({ callIndex: index, id, name, arguments: args })).content;
    } catch (err) {
      if (signal.aborted) throw new Finished(signal.reason === 'timeout' ? 'timeout' : 'aborted');
      throw err instanceof EnvironmentError ? err : new EnvironmentError(`tool ${name}: ${(err as Error).message}`);
    }
  };

  /** A sub-agent: its own conversation (a new branch of the same session), same tools minus delegation, shared memory; its answer is the tool result. */
  const subAgent = async (task: string): Promise<string> => {
    const system = opts.opening.find((m) => m.role === 'system');
    const sub: ChatMessage[] = [...(system ? [system] : []), { role: 'user', content: task }];
    const subTools = tools.filter((t) => t.function.name !== 'delegate');
    const max = opts.subAgentMaxSteps ?? 4;
    for (let s = 0; s < max; s++) {
      const c = await call(
        'subagent',
        sub.map((m) => ({ ...m })),
        subTools,
        false,
        opts.maxTokens,
      );
      sub.push(c.message);
      if (!c.message.tool_calls?.length) return c.message.content ?? '';
      for (const [i, tc] of c.message.tool_calls.entries())
        sub.push({ role: 'tool', tool_call_id: tc.id, content: await runTool(tc.function.name, tc.function.arguments, tc.id, i, 1) });
    }
    return 'error: sub-agent gave no answer';
  };

  try {
    for (;;) {
      if (result.steps >= opts.maxSteps) throw new Finished('max_steps');
      const view = await cm.view(history);
      const c = await call(
        'step',
        view.messages.map((m) => ({ ...m })),
        tools,
        view.rewritten,
        opts.maxTokens,
      );
      result.steps++;
      result.stepCallIds.push(c.callId);
      history.push(c.message);
      if (!c.message.tool_calls?.length) {
        result.finalAnswer = c.message.content;
        break;
      }
      let index = 0;
      for (const tc of c.message.tool_calls)
        history.push({
          role: 'tool',
          tool_call_id: tc.id,
          content: await runTool(tc.function.name, tc.function.arguments, tc.id, index++, 0),
        });
    }
  } catch (err) {
    if (!(err instanceof Finished)) throw err;
    result.finish = err.finish;
  }
  return result;
}
