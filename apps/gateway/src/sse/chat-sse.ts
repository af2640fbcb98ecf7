import type { FastifyReply } from 'fastify';
import type { ChoiceResult } from '../chat/call-service';
import type { PreparedCall } from '../chat/prepared-call';
import { chatLogprobs, completionId, usage } from '../openai/chat-response';
import { ContentStreamer } from './content-streamer';
import { hijackForStream, type CallStream } from './sse-stream';

/**
 * A streamed chat completion (`stream: true`): OpenAI chat.completion.chunk events. Content is
 * streamed as it is generated (what is safe to send, see ContentStreamer); the final events
 * (tool calls, finish_reason, usage) and [DONE] go out once the records are durable (`finish`
 * gets the recorded choices); if recording fails the stream ends with an error event instead,
 * which the SDKs raise.
 */
export function openChatStream(call: PreparedCall, reply: FastifyReply, headers: Record<string, string>): CallStream {
  const sse = hijackForStream(reply, headers);
  const base = {
    id: completionId(call),
    object: 'chat.completion.chunk',
    created: Math.floor(call.receivedAt / 1000),
    model: call.model.name,
    system_fingerprint: null,
  };
  const chunk = (index: number, delta: Record<string, unknown>, finish: string | null = null, logprobs: unknown = null) =>
    sse.send({ ...base, choices: [{ index, delta, logprobs, finish_reason: finish }] });
  const streamers = call.callIds.map(() => ContentStreamer.forCall(call));
  const opened = call.callIds.map(() => false);
  const open = (i: number) => {
    if (opened[i]) return;
    opened[i] = true;
    chunk(i, { role: 'assistant', content: '' });
  };
  const emit = (i: number, d: { reasoning?: string; content?: string }) => {
    if (d.reasoning !== undefined) chunk(i, { reasoning_content: d.reasoning });
    if (d.content) chunk(i, { content: d.content });
  };
  return {
    text(i, text) {
      const d = streamers[i].update(call.forcedText + text);
      if (d.reasoning !== undefined || d.content) {
        open(i);
        emit(i, d);
      }
    },
    finish(choices: readonly ChoiceResult[]) {
      for (const c of choices) {
        open(c.index);
        const message = c.reply?.message;
        if (message) emit(c.index, streamers[c.index].finish(message));
        if (message?.tool_calls?.length) {
          chunk(c.index, {
            tool_calls: message.tool_calls.map((tc, k) => ({
              index: k,
              id: tc.id,
              type: 'function',
              function: { name: tc.function.name, arguments: tc.function.arguments },
            })),
          });
        }
        const logprobs = call.logprobs
          ? chatLogprobs(
              call.model.format.tokenizer,
              c.generation.outputIds,
              c.generation.logprobs,
              call.model.format.stopTokenIds,
              c.generation.topLogprobs,
            )
          : null;
        chunk(c.index, {}, c.finishReason, logprobs);
      }
      if (call.includeUsage) sse.send({ ...base, choices: [], usage: usage(call, choices) });
      sse.done();
    },
    fail: (error) => sse.fail(error),
  };
}
