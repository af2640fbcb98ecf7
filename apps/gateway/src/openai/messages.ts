import type { ChatMessage, ToolDefinition } from '@anvil/tokenizer';
import type { ChatRequest } from './chat-request';

/**
 * The request's messages in the tokenizer's shape, with only the fields a chat template reads
 * (role, content, tool_calls, tool_call_id, name, reasoning): these are what gets rendered,
 * fingerprinted and stored. `developer` is OpenAI's newer name for `system`.
 */
export function toChatMessages(messages: ChatRequest['messages']): ChatMessage[] {
  return messages.map((m) => {
    const out: ChatMessage = { role: m.role === 'developer' ? 'system' : m.role, content: m.content ?? null };
    if ('name' in m && typeof m.name === 'string') out.name = m.name;
    if (m.role === 'assistant') {
      if (m.tool_calls && m.tool_calls.length > 0) {
        out.tool_calls = m.tool_calls.map((tc) => ({
          id: tc.id,
          type: 'function',
          function: { name: tc.function.name, arguments: tc.function.arguments },
        }));
      }
      const reasoning = m.reasoning_content ?? m.reasoning;
      if (typeof reasoning === 'string') out.reasoning_content = reasoning;
    }
    if (m.role === 'tool') out.tool_call_id = m.tool_call_id;
    return out;
  });
}

export function toToolDefinitions(tools: ChatRequest['tools']): ToolDefinition[] | null {
  if (!tools || tools.length === 0) return null;
  return tools.map((t) => {
    const fn: ToolDefinition['function'] = { name: t.function.name };
    if (t.function.description !== undefined) fn.description = t.function.description;
    if (t.function.parameters !== undefined) fn.parameters = t.function.parameters;
    return { type: 'function', function: fn };
  });
}
