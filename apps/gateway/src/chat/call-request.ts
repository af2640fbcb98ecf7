import type { SessionStateRow } from '../capture/record-committer';
import type { ChatRequest } from '../openai/chat-request';
import type { ChoiceResult } from './answer-assembly';
import type { PreparedCall } from './prepared-call';

/** One agent request as the HTTP layer received it. */
export interface CallRequest {
  kind: 'chat' | 'completion';
  body: unknown;
  /**
   * A chat request an adapter (the Responses and Messages APIs) has already validated and mapped
   * onto the chat form: used instead of parsing `body`, so every API takes the same path from here.
   */
  chat?: ChatRequest;
  authorization: string | undefined;
  /** The per-session URL's path segment, when the request came that way. */
  sessionKey: string | undefined;
  receivedAt: number;
  /** Aborted when the agent hangs up: the generation stops and nothing is recorded. */
  signal: AbortSignal;
}

/** What the HTTP layer learns while a call runs: the prepared call before generation starts (it may stream from then on). */
export interface CallHooks {
  /** Returns what should see each choice's text as it grows (SSE), if anything. */
  prepared?: (call: PreparedCall) => ((index: number, text: string) => void) | void;
  /**
   * Session state the answer depends on (the Responses API's stored response), given the
   * choices as they will be answered: written by the statement that records the call, so the
   * two are durable together or not at all.
   */
  sessionState?: (call: PreparedCall, choices: readonly ChoiceResult[]) => SessionStateRow[];
}
