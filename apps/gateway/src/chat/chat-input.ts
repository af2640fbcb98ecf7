import { fingerprintMessages, type ChatMessage, type ToolDefinition } from '@anvil/tokenizer';
import { GatewayError } from '../errors';
import type { ChatRequest } from '../openai/chat-request';
import { toChatMessages, toToolDefinitions } from '../openai/messages';

/** A chat request's messages, tools and template variables as rendered, with their prefix fingerprints. */
export interface ChatInput {
  messages: ChatMessage[];
  tools: ToolDefinition[] | null;
  toolChoice: ChatRequest['tool_choice'];
  /** false: a reply with several tool calls is returned as text (parallel_tool_calls, disable_parallel_tool_use). */
  parallelToolCalls: boolean;
  extra: Record<string, unknown>;
  fingerprints: string[];
}

/**
 * What a chat request renders and is fingerprinted as (validated; throws GatewayError): computed
 * before the session lookup, which fetches the capture row it extends in the same round trip.
 */
export function chatInput(req: ChatRequest): ChatInput {
  if (req.top_logprobs !== null && req.top_logprobs !== undefined && req.top_logprobs > 0 && req.logprobs !== true) {
    throw GatewayError.invalid('top_logprobs needs logprobs: true', 'top_logprobs');
  }
  const tools = toToolDefinitions(req.tools);
  const toolChoice = req.tool_choice ?? undefined;
  if (toolChoice && typeof toolChoice === 'object' && !tools?.some((t) => t.function.name === toolChoice.function.name)) {
    throw GatewayError.invalid(`tool_choice names \`${toolChoice.function.name}\`, which is not among the tools`, 'tool_choice');
  }
  if (toolChoice === 'required' && !tools) throw GatewayError.invalid('tool_choice "required" needs tools', 'tool_choice');
  const messages = toChatMessages(req.messages);
  const extra = req.chat_template_kwargs ?? {};
  const parallelToolCalls = req.parallel_tool_calls !== false;
  return { messages, tools, toolChoice, parallelToolCalls, extra, fingerprints: fingerprintMessages(messages, tools, extra) };
}
