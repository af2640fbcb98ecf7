import type { ChatMessage } from '@anvil/tokenizer';
import type { ChoiceResult } from '../chat/call-service';
import type { PreparedCall } from '../chat/prepared-call';
import type { ResponsesRequest } from './responses-request';

/** Ids of a response and its output items, derived from the call (so a stream and the stored response agree). */
export interface ResponseIds {
  response: string;
  reasoning: string;
  message: string;
  functionCall: (k: number) => string;
}

export function responseIds(call: PreparedCall): ResponseIds {
  const hex = call.requestId.replace(/-/g, '');
  return {
    response: `resp_${hex}`,
    reasoning: `rs_${hex}`,
    message: `msg_${hex}`,
    functionCall: (k) => `fc_${hex}_${k}`,
  };
}

export type OutputItem =
  | { type: 'reasoning'; id: string; summary: []; content: { type: 'reasoning_text'; text: string }[] }
  | {
      type: 'message';
      id: string;
      status: 'completed' | 'in_progress';
      role: 'assistant';
      content: { type: 'output_text'; text: string; annotations: []; logprobs: [] }[];
    }
  | {
      type: 'function_call';
      id: string;
      call_id: string;
      name: string;
      arguments: string;
      status: 'completed' | 'in_progress';
    };

/**
 * The reply as Responses output items, in the order the model wrote it: reasoning, the message,
 * the function calls. The message item is there whenever the reply has text or no calls (an
 * empty answer is still a turn the client must send back for the next call to extend this one).
 */
export function outputItems(message: ChatMessage, ids: ResponseIds): OutputItem[] {
  const items: OutputItem[] = [];
  const reasoning = message.reasoning_content;
  if (typeof reasoning === 'string')
    items.push({ type: 'reasoning', id: ids.reasoning, summary: [], content: [{ type: 'reasoning_text', text: reasoning }] });
  const text = typeof message.content === 'string' ? message.content : '';
  const calls = message.tool_calls ?? [];
  if (text !== '' || calls.length === 0) {
    items.push({
      type: 'message',
      id: ids.message,
      status: 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text, annotations: [], logprobs: [] }],
    });
  }
  calls.forEach((c, k) =>
    items.push({
      type: 'function_call',
      id: ids.functionCall(k),
      call_id: c.id,
      name: c.function.name,
      arguments: c.function.arguments,
      status: 'completed',
    }),
  );
  return items;
}

export function responsesUsage(call: PreparedCall, choice: ChoiceResult) {
  const input = call.plan.promptIds.length;
  const output = choice.generation.outputIds.length;
  const reasoning = choice.reply?.message.reasoning_content;
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: call.plan.reusedTokens },
    output_tokens: output,
    output_tokens_details: {
      reasoning_tokens: typeof reasoning === 'string' ? Math.min(output, call.model.format.tokenizer.encode(reasoning).length) : 0,
    },
    total_tokens: input + output,
  };
}

/** The request's own settings as the response object repeats them. */
export interface ResponseEcho {
  instructions: string | null;
  tools: unknown[];
  toolChoice: ResponsesRequest['tool_choice'];
  parallelToolCalls: boolean;
  maxOutputTokens: number | null;
  temperature: number;
  topP: number;
  previousResponseId: string | null;
  store: boolean;
  metadata: Record<string, string>;
}

export const responseEcho = (req: ResponsesRequest): ResponseEcho => ({
  instructions: req.instructions ?? null,
  tools: req.tools ?? [],
  toolChoice: req.tool_choice ?? 'auto',
  parallelToolCalls: req.parallel_tool_calls !== false,
  maxOutputTokens: req.max_output_tokens ?? null,
  temperature: req.temperature ?? 1,
  topP: req.top_p ?? 1,
  previousResponseId: req.previous_response_id ?? null,
  store: req.store !== false,
  metadata: req.metadata ?? {},
});

/**
 * The response object (`object: "response"`). `choice` absent: the in-progress shell a stream
 * opens with (response.created / response.in_progress). A reply cut by the token limit is
 * `incomplete` with reason max_output_tokens, as OpenAI answers it.
 */
export function responseObject(call: PreparedCall, echo: ResponseEcho, choice?: ChoiceResult) {
  const ids = responseIds(call);
  const incomplete = choice?.finishReason === 'length';
  return {
    id: ids.response,
    object: 'response' as const,
    created_at: Math.floor(call.receivedAt / 1000),
    status: !choice ? ('in_progress' as const) : incomplete ? ('incomplete' as const) : ('completed' as const),
    background: false,
    error: null,
    incomplete_details: incomplete ? { reason: 'max_output_tokens' as const } : null,
    instructions: echo.instructions,
    max_output_tokens: echo.maxOutputTokens,
    max_tool_calls: null,
    model: call.model.name,
    output: choice?.reply ? outputItems(choice.reply.message, ids) : [],
    parallel_tool_calls: echo.parallelToolCalls,
    previous_response_id: echo.previousResponseId,
    reasoning: { effort: null, summary: null },
    service_tier: 'default',
    store: echo.store,
    temperature: echo.temperature,
    text: { format: { type: 'text' as const }, verbosity: 'medium' },
    tool_choice: echo.toolChoice,
    tools: echo.tools,
    top_logprobs: 0,
    top_p: echo.topP,
    truncation: 'disabled',
    usage: choice ? responsesUsage(call, choice) : null,
    user: null,
    metadata: echo.metadata,
  };
}
export type ResponseObject = ReturnType<typeof responseObject>;
