import { createHash } from 'node:crypto';
import { ChatTemplate, contentText, messageReasoning } from './chat-template';
import type { ChatMessage, Tokenizer, ToolDefinition } from './types';

/**
 * Token-exact continuation (DESIGN.md, "Token-exact capture"): a request whose messages extend
 * an earlier call's messages plus the reply it got is prompted with that call's prompt ids +
 * its output ids + the encoding of only what is new (the bridge the template puts after the
 * reply, and the new messages). History is never decoded and re-encoded.
 */

/** JSON with object keys sorted at every level: the same value always gives the same text. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
  const obj = value as Record<string, unknown>;
  const keys = Object.keys(obj)
    .filter((k) => obj[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
}

/** A tool call's arguments in canonical form (parsed when valid JSON, else the text itself). */
function canonicalArguments(args: string): unknown {
  try {
    return { json: JSON.parse(args) as unknown };
  } catch {
    return { text: args };
  }
}

/**
 * The identity of a message for matching: role, content text (parts joined), tool calls (id,
 * name, arguments compared as JSON values: key order and spacing do not matter), tool_call_id,
 * name. Reasoning is left out: agents often do not echo it back (planContinuation restores it
 * from the stored reply and rejects a different one).
 */
export function canonicalMessage(m: ChatMessage): string {
  const out: Record<string, unknown> = { role: m.role, content: contentText(m.content) };
  if (m.tool_calls && m.tool_calls.length > 0) {
    out.tool_calls = m.tool_calls.map((tc) => ({
      id: tc.id,
      name: tc.function.name,
      arguments: canonicalArguments(tc.function.arguments),
    }));
  }
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
  if (m.name !== undefined) out.name = m.name;
  return canonicalJson(out);
}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/**
 * Hash of every message prefix: result[k] identifies (tools, extra, messages[0..k)), for k = 0..n
 * (n + 1 entries). Stable across JSON key order and argument spacing. The gateway stores
 * result[n + 1] of a call's messages plus its reply, and looks up result[k] of a new request
 * to find the call it extends.
 */
export function fingerprintMessages(
  messages: readonly ChatMessage[],
  tools?: readonly ToolDefinition[] | null,
  extra?: Record<string, unknown>,
): string[] {
  let h = sha256(`anvil-fp-v1\u0000${canonicalJson(tools && tools.length > 0 ? tools : null)}\u0000${canonicalJson(extra ?? {})}`);
  const out = [h];
  for (const m of messages) {
    h = sha256(`${h}\u0000${canonicalMessage(m)}`);
    out.push(h);
  }
  return out;
}

/**
 * fingerprintMessages(messages + [message]).at(-1) from fingerprintMessages(messages).at(-1):
 * the prefix hashes are chained, so appending a reply costs one hash, not one per message.
 */
export function appendFingerprint(prefix: string, message: ChatMessage): string {
  return sha256(`${prefix}\u0000${canonicalMessage(message)}`);
}

export type BranchReason =
  /** The new messages do not start with the previous messages. */
  | 'not-an-extension'
  /** Tools or template variables differ from the previous call's. */
  | 'tools-changed'
  | 'options-changed'
  /** The message in the reply's place is not the reply (edited, or a different reasoning). */
  | 'assistant-mismatch'
  /** The previous prompt ids do not decode to the rendering of the previous messages. */
  | 'prompt-mismatch'
  /** The new rendering does not start with the previous prompt's text (e.g. Qwen3 drops earlier <think> blocks). */
  | 'template-rewrites-history'
  /** The template renders the reply differently from what the model wrote. */
  | 'assistant-render-mismatch';

export interface ContinuationInput {
  template: ChatTemplate;
  tokenizer: Tokenizer;
  /** Messages of the previous call. */
  prevMessages: readonly ChatMessage[];
  /** Exact prompt ids of the previous call. */
  prevPromptIds: readonly number[];
  /** Ids the model produced, as sampled (with or without the end-of-turn id). */
  prevOutputIds: readonly number[];
  /** The reply as the gateway returned it (reasoning included when it was split off). */
  assistantMessage: ChatMessage;
  /** The new request's messages. */
  newMessages: readonly ChatMessage[];
  /** Tools of the new request. */
  tools?: readonly ToolDefinition[] | null;
  /** Tools of the previous call (default: the same as `tools`). */
  prevTools?: readonly ToolDefinition[] | null;
  /** Template variables of the new request (enable_thinking, ...). */
  extra?: Record<string, unknown>;
  /** Template variables of the previous call (default: the same as `extra`). */
  prevExtra?: Record<string, unknown>;
  /**
   * Check that prevPromptIds decode to the rendering of prevMessages (a decode, no encode;
   * default true): guards against a prompt built with another template, tokenizer or options.
   */
  verifyPrevPrompt?: boolean;
  /**
   * Ids that may end the output without being part of the rendered reply (e.g. `<|endoftext|>`
   * where the template closes the turn with `<|im_end|>`): when the output ends with one and
   * does not match with it, it is dropped (default: any special token, which can only end an
   * output as the stop token; pass the chat format's stopTokenIds to be strict).
   */
  droppableStopIds?: readonly number[];
  /**
   * The rendering of prevMessages (prevTools, prevExtra, generation prompt), when the caller
   * kept it from the previous call (the plan's `text`): saves rendering the whole history again.
   */
  prevText?: string;
}

export type ContinuationPlan =
  | {
      kind: 'extend';
      /** prevPromptIds + output ids (less a dropped stop id) + encode(bridge + new messages). */
      promptIds: number[];
      /**
       * The messages the prompt renders: prevMessages, the stored reply (with its reasoning), then
       * the new messages. Store these as the call's messages: they are the next continuation's
       * prevMessages.
       */
      messages: ChatMessage[];
      /** How many leading ids come from the previous call (prompt + output). */
      reusedTokens: number;
      /** The newly encoded ids (promptIds.slice(reusedTokens)). */
      appendedIds: number[];
      /** Text of appendedIds: the template's bridge after the reply, then the new messages and the generation prompt. */
      appendedText: string;
      /** The rendering of `messages` with the generation prompt (the next continuation's prevText). */
      text: string;
      /** True when the output's last id was a stop id outside the rendered reply and was left out. */
      droppedStopId: boolean;
      /**
       * True when the boundary between the reused and the new ids falls on an added token (the
       * usual case: `<|im_end|>` closes the turn). Otherwise the encoder could have merged across
       * it, and the ids may differ from a full re-encode (still a faithful encoding of the text).
       */
      cleanBoundary: boolean;
    }
  | { kind: 'branch'; reason: BranchReason; detail: string };

const branch = (reason: BranchReason, detail: string): ContinuationPlan => ({ kind: 'branch', reason, detail });

function startsWithAddedToken(text: string, tok: Tokenizer): boolean {
  if (!text.startsWith('<')) return false;
  for (const t of tok.addedTokens.keys()) if (text.startsWith(t)) return true;
  return false;
}

/** Plans the prompt ids of a request that may extend a previous call (see ContinuationPlan). */
export function planContinuation(input: ContinuationInput): ContinuationPlan {
  const { template, tokenizer, prevMessages, newMessages, assistantMessage } = input;
  const tools = input.tools ?? null;
  const prevTools = input.prevTools === undefined ? tools : input.prevTools;
  const extra = input.extra ?? {};
  const prevExtra = input.prevExtra === undefined ? extra : input.prevExtra;

  if (canonicalJson(tools && tools.length ? tools : null) !== canonicalJson(prevTools && prevTools.length ? prevTools : null)) {
    return branch('tools-changed', 'the tools differ from the previous call');
  }
  if (canonicalJson(extra) !== canonicalJson(prevExtra))
    return branch('options-changed', 'template variables differ from the previous call');
  const n = prevMessages.length;
  if (newMessages.length < n + 1)
    return branch('not-an-extension', `${newMessages.length} messages, the previous call had ${n} + its reply`);
  for (let i = 0; i < n; i++) {
    if (canonicalMessage(newMessages[i]) !== canonicalMessage(prevMessages[i])) return branch('not-an-extension', `message ${i} differs`);
  }
  const echoed = newMessages[n];
  if (assistantMessage.role !== 'assistant' || canonicalMessage(echoed) !== canonicalMessage(assistantMessage)) {
    return branch('assistant-mismatch', `message ${n} is not the previous reply`);
  }
  const echoedReasoning = messageReasoning(echoed);
  const storedReasoning = messageReasoning(assistantMessage);
  if (echoedReasoning !== undefined && echoedReasoning !== '' && echoedReasoning !== (storedReasoning ?? '')) {
    return branch('assistant-mismatch', `message ${n} carries a different reasoning`);
  }
  // Rendered history: the previous call's messages and the stored reply (with its reasoning) as
  // they were, not as the agent echoes them (equal as values, but an agent may re-serialise
  // arguments or drop reasoning, and templates print what they are given); then the new messages.
  const history = [...prevMessages, assistantMessage, ...newMessages.slice(n + 1)];

  const prevText = input.prevText ?? template.render(prevMessages, { tools: prevTools, addGenerationPrompt: true, extra: prevExtra });
  if (input.verifyPrevPrompt !== false) {
    const decoded = tokenizer.decode(input.prevPromptIds);
    if (decoded !== prevText && decoded !== tokenizer.normalize(prevText))
      return branch('prompt-mismatch', 'the previous prompt ids do not decode to the rendering of the previous messages');
  }
  // Tools equal as values are rendered as the previous call's (same key order, same text).
  const newText = template.render(history, { tools: prevTools, addGenerationPrompt: true, extra: prevExtra });
  if (!newText.startsWith(prevText)) {
    let at = 0;
    while (at < prevText.length && prevText[at] === newText[at]) at++;
    return branch(
      'template-rewrites-history',
      `the renderings part at character ${at}: ${JSON.stringify(prevText.slice(at, at + 40))} became ${JSON.stringify(newText.slice(at, at + 40))}`,
    );
  }
  const afterPrompt = newText.slice(prevText.length);

  let outputIds = input.prevOutputIds;
  let outputText = tokenizer.decode(outputIds);
  let droppedStopId = false;
  if (!afterPrompt.startsWith(outputText) && outputIds.length > 0) {
    const last = outputIds[outputIds.length - 1];
    const droppable = input.droppableStopIds ? input.droppableStopIds.includes(last) : tokenizer.isSpecial(last);
    if (droppable) {
      const shorter = outputIds.slice(0, -1);
      const shorterText = tokenizer.decode(shorter);
      if (afterPrompt.startsWith(shorterText)) {
        outputIds = shorter;
        outputText = shorterText;
        droppedStopId = true;
      }
    }
  }
  if (!afterPrompt.startsWith(outputText)) {
    const reasoning = storedReasoning?.trim();
    if (reasoning && outputText.includes(reasoning) && !afterPrompt.includes(reasoning)) {
      return branch('template-rewrites-history', "the template drops the reply's reasoning (<think> block) from history");
    }
    let at = 0;
    while (at < outputText.length && outputText[at] === afterPrompt[at]) at++;
    return branch(
      'assistant-render-mismatch',
      `the template renders the reply as ${JSON.stringify(afterPrompt.slice(at, at + 40))} where the model wrote ${JSON.stringify(outputText.slice(at, at + 40))} (character ${at})`,
    );
  }
  const appendedText = afterPrompt.slice(outputText.length);
  const appendedIds = tokenizer.encode(appendedText);
  const lastReused = outputIds.length > 0 ? outputIds[outputIds.length - 1] : input.prevPromptIds[input.prevPromptIds.length - 1];
  const lastToken = lastReused === undefined ? undefined : tokenizer.idToToken(lastReused);
  const cleanBoundary =
    appendedText.length === 0 ||
    startsWithAddedToken(appendedText, tokenizer) ||
    (lastToken !== undefined && tokenizer.addedTokens.has(lastToken));
  const promptIds = [...input.prevPromptIds, ...outputIds, ...appendedIds];
  return {
    kind: 'extend',
    promptIds,
    messages: history,
    reusedTokens: input.prevPromptIds.length + outputIds.length,
    appendedIds,
    appendedText,
    text: newText,
    droppedStopId,
    cleanBoundary,
  };
}
