import type { FastifyReply } from 'fastify';
import type { ChoiceResult } from '../chat/call-service';
import type { PreparedCall } from '../chat/prepared-call';
import { StopStringMatcher } from '../generation/stop-strings';
import { completionLogprobs, usage } from '../openai/chat-response';
import { hijackForStream, type CallStream } from './sse-stream';

/**
 * A streamed /v1/completions answer (`stream: true`): OpenAI text_completion chunks. Text goes
 * out as it is generated, except a tail that could still be the start of a stop string (held
 * back until it cannot, so nothing sent is ever taken back); once the records are durable
 * (`finish`), each choice's last chunk (the rest of its text, finish_reason and, with
 * `logprobs`, the logprobs of all its tokens), then usage (stream_options.include_usage) and
 * [DONE]. If recording fails, the stream ends with an error event instead, which the SDKs raise.
 */
export function openCompletionStream(call: PreparedCall, reply: FastifyReply, headers: Record<string, string>): CallStream {
  const sse = hijackForStream(reply, headers);
  const base = {
    id: `cmpl-${call.requestId}`,
    object: 'text_completion',
    created: Math.floor(call.receivedAt / 1000),
    model: call.model.name,
    system_fingerprint: null,
  };
  const chunk = (index: number, text: string, finish: string | null = null, logprobs: unknown = null) =>
    sse.send({ ...base, choices: [{ index, text, logprobs, finish_reason: finish }] });
  const stops = call.callIds.map(() => new StopStringMatcher(call.stop));
  const sent = call.callIds.map(() => 0);
  return {
    text(i, text) {
      const safe = text.length - (stops[i].active ? stops[i].pendingSuffix(text) : 0);
      if (safe <= sent[i]) return;
      chunk(i, text.slice(sent[i], safe));
      sent[i] = safe;
    },
    finish(choices: readonly ChoiceResult[]) {
      const tok = call.model.format.tokenizer;
      for (const c of choices) {
        const text = c.generation.text;
        const rest = text.length > sent[c.index] ? text.slice(sent[c.index]) : '';
        const logprobs = call.logprobs
          ? completionLogprobs(tok, c.generation.outputIds, c.generation.logprobs, c.generation.topLogprobs)
          : null;
        chunk(c.index, rest, c.finishReason, logprobs);
      }
      if (call.includeUsage) sse.send({ ...base, choices: [], usage: usage(call, choices) });
      sse.done();
    },
    fail: (error) => sse.fail(error),
  };
}
