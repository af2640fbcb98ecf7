import type { IncomingHttpHeaders } from 'node:http';
import type { ChatMessage } from '@anvil/tokenizer';
import type { ChoiceResult } from '../chat/call-service';
import type { PreparedCall } from '../chat/prepared-call';
import type { ServedModel } from '../models/model-registry';

/** A request from one of Anthropic's clients: they send `anthropic-version`, and the key in `x-api-key`. */
export const isAnthropicClient = (headers: IncomingHttpHeaders): boolean =>
  headers['anthropic-version'] !== undefined || headers['x-api-key'] !== undefined;

/**
 * The session credential of an Anthropic client's request, as the Authorization value the
 * session authenticator reads: `x-api-key` (ANTHROPIC_API_KEY), or `Authorization: Bearer`
 * (ANTHROPIC_AUTH_TOKEN). When both come, an Anvil key wins over a placeholder in the other.
 */
export function anthropicAuthorization(headers: IncomingHttpHeaders): string | undefined {
  const key = headers['x-api-key'];
  const value = Array.isArray(key) ? key[0] : key;
  if (value && (value.startsWith('anvil-') || !headers.authorization)) return `Bearer ${value}`;
  return headers.authorization;
}

export const anthropicModel = (m: ServedModel) => ({
  type: 'model' as const,
  id: m.name,
  display_name: m.name,
  created_at: new Date(m.created * 1000).toISOString(),
});

export type ContentBlock =
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown };

/** Tool arguments as the `input` object (the model's JSON; parsed, since it is only returned when it parsed). */
function toolInput(args: string): unknown {
  try {
    return JSON.parse(args) as unknown;
  } catch {
    return {};
  }
}

/**
 * The reply as content blocks, in the order the model wrote it: thinking, text, tool_use. A text
 * block is there whenever the reply has text or no calls. Thinking carries an empty signature:
 * there is nothing to verify on a self-hosted policy, and a turn sent back extends the stored
 * reply whatever its signature.
 */
export function contentBlocks(message: ChatMessage): ContentBlock[] {
  const blocks: ContentBlock[] = [];
  if (typeof message.reasoning_content === 'string') blocks.push({ type: 'thinking', thinking: message.reasoning_content, signature: '' });
  const text = typeof message.content === 'string' ? message.content : '';
  const calls = message.tool_calls ?? [];
  if (text !== '' || calls.length === 0) blocks.push({ type: 'text', text });
  for (const c of calls) blocks.push({ type: 'tool_use', id: c.id, name: c.function.name, input: toolInput(c.function.arguments) });
  return blocks;
}

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use';

export function stopReason(choice: ChoiceResult): { stop_reason: StopReason; stop_sequence: string | null } {
  if (choice.finishReason === 'tool_calls') return { stop_reason: 'tool_use', stop_sequence: null };
  if (choice.finishReason === 'length') return { stop_reason: 'max_tokens', stop_sequence: null };
  if (choice.generation.stoppedByString) return { stop_reason: 'stop_sequence', stop_sequence: choice.generation.stopString ?? null };
  return { stop_reason: 'end_turn', stop_sequence: null };
}

/**
 * Anthropic's usage: input_tokens are the prompt tokens that were not reused from the call this
 * one extends, which are cache_read_input_tokens (Claude Code adds the two for its context meter).
 */
export function messagesUsage(call: PreparedCall, choice?: ChoiceResult) {
  const reused = call.plan.reusedTokens;
  return {
    input_tokens: call.plan.promptIds.length - reused,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: reused,
    output_tokens: choice ? choice.generation.outputIds.length : 0,
  };
}

export const messageId = (call: PreparedCall) => `msg_${call.requestId.replace(/-/g, '')}`;

/** The non-streaming message object. */
export function messageObject(call: PreparedCall, choice: ChoiceResult) {
  return {
    id: messageId(call),
    type: 'message' as const,
    role: 'assistant' as const,
    model: call.model.name,
    content: choice.reply ? contentBlocks(choice.reply.message) : [],
    ...stopReason(choice),
    usage: messagesUsage(call, choice),
  };
}
