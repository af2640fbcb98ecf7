import type { TopLogprobs } from '@anvil/contracts';
import type { Tokenizer } from '@anvil/tokenizer';
import type { ChoiceResult } from '../chat/call-service';
import type { PreparedCall } from '../chat/prepared-call';

/** One token as OpenAI's logprobs list it: its text, and its UTF-8 bytes (a token may hold part of a character). */
function tokenEntry(tok: Tokenizer, id: number, logprob: number) {
  const bytes = tok.tokenBytes(id);
  const token = tok.decode([id]);
  return { token, logprob, bytes: bytes ? Array.from(bytes) : Array.from(Buffer.from(token, 'utf8')) };
}

/**
 * OpenAI's logprobs.content entries for the sampled tokens, each with its `top_logprobs`
 * alternatives when they were asked for (top_logprobs: k). Only the tokens the reply text
 * leaves out are left out: the stop ids (`hidden`, the end of turn), so every other token,
 * special or not, has its entry, as it has its text in `message.content` and its count in
 * `usage.completion_tokens`.
 */
export function chatLogprobs(
  tok: Tokenizer,
  ids: readonly number[],
  logprobs: readonly number[],
  hidden: readonly number[],
  top?: readonly TopLogprobs[],
) {
  const content: (ReturnType<typeof tokenEntry> & { top_logprobs: ReturnType<typeof tokenEntry>[] })[] = [];
  ids.forEach((id, i) => {
    if (hidden.includes(id)) return;
    const alternatives = top?.[i] ? top[i].ids.map((alt, j) => tokenEntry(tok, alt, top[i].logprobs[j])) : [];
    content.push({ ...tokenEntry(tok, id, logprobs[i]), top_logprobs: alternatives });
  });
  return { content };
}

/** {text: logprob}, most likely first; alternatives that decode to the same text keep the likelier one (as OpenAI's map can hold only one). */
function alternativesByText(tok: Tokenizer, t: TopLogprobs): Record<string, number> {
  const out: Record<string, number> = {};
  t.ids.forEach((id, j) => {
    const text = tok.decode([id]);
    if (!(text in out)) out[text] = t.logprobs[j];
  });
  return out;
}

/** The legacy completions logprobs object: tokens, their logprobs, per token a {text: logprob} map of alternatives (null without), offsets. */
export function completionLogprobs(
  tok: Tokenizer,
  ids: readonly number[],
  logprobs: readonly number[],
  top: readonly TopLogprobs[] | undefined,
  textStart = 0,
) {
  const tokens = ids.map((id) => tok.decode([id]));
  const text_offset: number[] = [];
  let at = textStart;
  for (const t of tokens) {
    text_offset.push(at);
    at += t.length;
  }
  return {
    tokens,
    token_logprobs: [...logprobs],
    top_logprobs: top ? top.map((t) => alternativesByText(tok, t)) : null,
    text_offset,
  };
}

export function usage(call: PreparedCall, choices: readonly ChoiceResult[]) {
  const completion = choices.reduce((s, c) => s + c.generation.outputIds.length, 0);
  const prompt = call.plan.promptIds.length;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: call.plan.reusedTokens },
  };
}

export const completionId = (call: PreparedCall) => `chatcmpl-${call.requestId}`;

/** The non-streaming chat.completion object. */
export function chatCompletion(call: PreparedCall, choices: readonly ChoiceResult[]) {
  const tok = call.model.format.tokenizer;
  return {
    id: completionId(call),
    object: 'chat.completion' as const,
    created: Math.floor(call.receivedAt / 1000),
    model: call.model.name,
    system_fingerprint: null,
    choices: choices.map((c) => ({
      index: c.index,
      message: {
        role: 'assistant' as const,
        content: c.reply?.message.content ?? null,
        refusal: null,
        ...(c.reply?.message.tool_calls ? { tool_calls: c.reply.message.tool_calls } : {}),
        ...(c.reply?.message.reasoning_content !== undefined ? { reasoning_content: c.reply.message.reasoning_content } : {}),
      },
      logprobs: call.logprobs
        ? chatLogprobs(tok, c.generation.outputIds, c.generation.logprobs, call.model.format.stopTokenIds, c.generation.topLogprobs)
        : null,
      finish_reason: c.finishReason,
    })),
    usage: usage(call, choices),
  };
}

/** The non-streaming text_completion object of /v1/completions. */
export function textCompletion(call: PreparedCall, choices: readonly ChoiceResult[]) {
  const tok = call.model.format.tokenizer;
  return {
    id: `cmpl-${call.requestId}`,
    object: 'text_completion' as const,
    created: Math.floor(call.receivedAt / 1000),
    model: call.model.name,
    choices: choices.map((c) => ({
      index: c.index,
      text: c.generation.text,
      logprobs: call.logprobs ? completionLogprobs(tok, c.generation.outputIds, c.generation.logprobs, c.generation.topLogprobs) : null,
      finish_reason: c.finishReason,
    })),
    usage: usage(call, choices),
  };
}
