import type { Tokenizer } from '@anvil/tokenizer';
import type { ChoiceResult } from '../chat/call-service';
import type { PreparedCall } from '../chat/prepared-call';

/** OpenAI's logprobs.content entries for the sampled tokens (top_logprobs are not available from the engine: always []). */
export function chatLogprobs(tok: Tokenizer, ids: readonly number[], logprobs: readonly number[]) {
  const content: { token: string; logprob: number; bytes: number[]; top_logprobs: never[] }[] = [];
  ids.forEach((id, i) => {
    if (tok.isSpecial(id)) return;
    const bytes = tok.tokenBytes(id);
    content.push({ token: tok.decode([id]), logprob: logprobs[i], bytes: bytes ? Array.from(bytes) : Array.from(Buffer.from(tok.decode([id]), 'utf8')), top_logprobs: [] });
  });
  return { content };
}

export function usage(call: PreparedCall, choices: readonly ChoiceResult[]) {
  const completion = choices.reduce((s, c) => s + c.generation.outputIds.length, 0);
  const prompt = call.plan.promptIds.length;
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: call.plan.reusedTokens } };
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
      message: { role: 'assistant' as const, content: c.reply?.message.content ?? null, refusal: null, ...(c.reply?.message.tool_calls ? { tool_calls: c.reply.message.tool_calls } : {}), ...(c.reply?.message.reasoning_content !== undefined ? { reasoning_content: c.reply.message.reasoning_content } : {}) },
      logprobs: call.logprobs ? chatLogprobs(tok, c.generation.outputIds, c.generation.logprobs) : null,
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
      logprobs: call.logprobs
        ? { tokens: c.generation.outputIds.map((id) => tok.decode([id])), token_logprobs: c.generation.logprobs, top_logprobs: null, text_offset: [] as number[] }
        : null,
      finish_reason: c.finishReason,
    })),
    usage: usage(call, choices),
  };
}
