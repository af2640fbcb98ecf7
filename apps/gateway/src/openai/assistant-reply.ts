import { parseAssistantOutput, type ChatFormat, type ChatMessage, type ToolDefinition } from '@anvil/tokenizer';
import type { ChatRequest } from './chat-request';

export interface AssistantReply {
  /** What the agent gets (and is expected to echo back): content, tool_calls, reasoning_content. */
  message: ChatMessage;
  /** True when tool_calls are returned (finish_reason becomes "tool_calls"). */
  hasToolCalls: boolean;
  /** Why tool-call blocks in the output were returned as plain text instead (unknown tool, malformed block). */
  toolCallIssue: string | null;
}

export interface ReplyOptions {
  format: ChatFormat;
  tools: ToolDefinition[] | null;
  toolChoice: ChatRequest['tool_choice'];
  /** false: several tool calls in one reply are an issue (returned as text), as a malformed block is. */
  parallelToolCalls?: boolean;
  /** The generation prompt ends inside an open <think> block. */
  promptOpensThink: boolean;
  /** Seeds deterministic tool-call ids (the call id). */
  idSeed: string;
}

/**
 * Reasoning is split off only when the reply is in a reasoning block: it opens with <think>, or
 * the generation prompt left one open. (A stray </think> later in ordinary text stays text, so a
 * streamed reply never has to take back content it already sent.)
 */
export function reasoningMode(text: string, o: Pick<ReplyOptions, 'format' | 'promptOpensThink'>): 'auto' | 'none' {
  if (!o.format.reasoning) return 'none';
  return o.promptOpensThink || text.trimStart().startsWith('<think>') ? 'auto' : 'none';
}

/** Whether tool calls are parsed at all: tools offered, tool_choice not "none", a known syntax. */
export function parsesToolCalls(o: Pick<ReplyOptions, 'format' | 'tools' | 'toolChoice'>): boolean {
  return !!o.tools && o.tools.length > 0 && o.toolChoice !== 'none' && o.format.toolCallFormat !== 'none';
}

/**
 * The reply message for the model's output text. Tool calls are returned only when every
 * tool-call block parses and names an offered tool. Otherwise (a call to a tool that was not
 * offered, a malformed block) NO tool_calls are returned: the whole output stays in `content`
 * as the model wrote it, with finish_reason "stop"/"length", and the issue is reported in the
 * `x-anvil-tool-call-issue` header. Keeping the exact text means the agent's echo re-renders to
 * the sampled ids, so the next turn still extends token-exactly; the record keeps what the model
 * did, and the reward can judge it. With parallel tool calls off, a reply holding several calls is
 * such a reply too: cutting it to its first call would answer what the model did not sample.
 */
export function buildAssistantReply(text: string, o: ReplyOptions): AssistantReply {
  const reasoning = reasoningMode(text, o);
  const format = parsesToolCalls(o) ? o.format.toolCallFormat : 'none';
  let parsed = parseAssistantOutput(text, { format, tools: o.tools, reasoning, idSeed: o.idSeed });
  let toolCallIssue: string | null = null;
  const tooMany = o.parallelToolCalls === false && parsed.toolCalls.length > 1;
  if (parsed.unknownTools.length > 0 || parsed.malformed || tooMany) {
    toolCallIssue =
      parsed.unknownTools.length > 0
        ? `the model called tools that were not offered: ${parsed.unknownTools.join(', ')}`
        : parsed.malformed
          ? `malformed tool call: ${parsed.issues[0]?.message ?? 'unparseable block'}`
          : `the model made ${parsed.toolCalls.length} tool calls where parallel tool calls are off`;
    parsed = parseAssistantOutput(text, { format: 'none', reasoning, idSeed: o.idSeed });
  }
  const message: ChatMessage = { role: 'assistant', content: parsed.content ?? (parsed.toolCalls.length > 0 ? null : '') };
  if (parsed.reasoning !== undefined) message.reasoning_content = parsed.reasoning;
  if (parsed.toolCalls.length > 0) {
    message.tool_calls = parsed.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
  }
  return { message, hasToolCalls: parsed.toolCalls.length > 0, toolCallIssue };
}
