import type { z } from 'zod';
import { GatewayError } from '../errors';
import type { ChatRequest } from '../openai/chat-request';

/**
 * What the Responses and Messages adapters map a request onto: the chat request the call
 * service takes (CallRequest.chat), so every API renders with the same template, parses tool
 * calls with the same parser and extends or branches through the same capture.
 */
export type ChatForm = ChatRequest;
export type ChatFormMessage = ChatRequest['messages'][number];
export type ChatFormAssistant = Extract<ChatFormMessage, { role: 'assistant' }>;
export type ChatFormTool = ChatForm['tools'] extends (infer T)[] | null | undefined ? T : never;

/** The first problem of a failed schema check, its field named as the client wrote it (`input[2].call_id`). */
export function schemaProblem(error: z.ZodError, at: string): GatewayError {
  const issue = error.issues[0];
  const field = at + (issue?.path ?? []).map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('');
  return GatewayError.invalid(`${field}: ${issue?.message ?? 'invalid'}`, field);
}

/**
 * Every tool result must answer a call made earlier in the conversation (what both providers
 * refuse too): a result for a call that was never issued would reach the model as an answer to
 * nothing, and be trained on as such.
 */
export function checkToolResults(messages: readonly ChatFormMessage[], where: (index: number) => string, what: string): void {
  const issued = new Set<string>();
  messages.forEach((m, i) => {
    if (m.role === 'assistant') for (const c of m.tool_calls ?? []) issued.add(c.id);
    if (m.role === 'tool' && !issued.has(m.tool_call_id)) {
      throw GatewayError.invalid(
        `${where(i)}: no tool call with id \`${m.tool_call_id.slice(0, 128)}\` was issued earlier in this conversation`,
        where(i),
        `unknown_${what}`,
      );
    }
  });
}

/** Tool types the gateway cannot run for the model (hosted tools, server tools): not offered, and named in a response header. */
export const ignoredToolsHeader = (names: readonly string[]): Record<string, string> =>
  names.length > 0
    ? {
        'x-anvil-ignored-tools': names
          .join(',')
          .replace(/[^\x20-\x7e]/g, '?')
          .slice(0, 300),
      }
    : {};
