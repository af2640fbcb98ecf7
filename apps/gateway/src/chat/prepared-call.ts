import type { GenerateConstraint } from '@anvil/contracts';
import type { GatewaySession } from '@anvil/persistence';
import type { ChatMessage, ToolDefinition } from '@anvil/tokenizer';
import type { PlannedPrompt } from '../capture/prompt-planner';
import type { ServedModel } from '../models/model-registry';
import type { ChatRequest } from '../openai/chat-request';

/** A validated, admitted request with its prompt planned: everything generation and recording need. */
export interface PreparedCall {
  kind: 'chat' | 'completion';
  /** Answered as server-sent events (`stream: true`), with a usage chunk when `stream_options.include_usage`. */
  stream: boolean;
  includeUsage: boolean;
  requestId: string;
  receivedAt: number;
  session: GatewaySession;
  model: ServedModel;
  plan: PlannedPrompt;
  /** The parent's branch when extending, else a new one shared by all n choices. */
  branchId: string;
  /** One call id per choice (also the inference-proxy request id and the record's event id). */
  callIds: string[];
  /**
   * Chat with `tool_choice` "required" or a named tool: the opening of the tool call appended
   * to the prompt (already in plan.promptIds and plan.text), which the reply text starts with.
   */
  forcedText: string;
  /** With forcedText: the rest of the forced tool call as a grammar the engine holds the model to (see forced-tool-call.ts). */
  constraint?: GenerateConstraint;
  maxTokens: number;
  sampling: { temperature: number; topP: number; topK: number; seed: number | null };
  stop: string[];
  logprobs: boolean;
  /** Alternatives per token asked for (chat top_logprobs, completions logprobs: k); 0 = none. */
  topLogprobs: number;
  /** Chat only. */
  tools: ToolDefinition[] | null;
  toolChoice: ChatRequest['tool_choice'];
  /** Chat only: false when the request allows at most one tool call per reply (undefined: any number). */
  parallelToolCalls?: boolean;
  extra: Record<string, unknown>;
  messages: ChatMessage[];
  /** Chat only: fingerprintMessages(messages, tools, extra).at(-1), which the reply's fingerprint extends. */
  fingerprint?: string;
}
