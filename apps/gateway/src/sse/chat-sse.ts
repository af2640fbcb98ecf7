import type { FastifyReply } from 'fastify';
import type { CallService } from '../chat/call-service';
import type { PreparedCall } from '../chat/prepared-call';
import type { ApiError } from '../http/api-error';
import { chatLogprobs, completionId, usage } from '../openai/chat-response';
import { ContentStreamer } from './content-streamer';
import { SseStream } from './sse-stream';

/**
 * A streamed chat completion (`stream: true`): OpenAI chat.completion.chunk events. Content is
 * streamed as it is generated (what is safe to send, see ContentStreamer); the records are
 * published (durable) BEFORE the final events (tool calls, finish_reason, usage) and [DONE]; if
 * that fails, the stream ends with an error event instead, and the SDKs raise it.
 */
export async function streamChat(call: PreparedCall, calls: CallService, reply: FastifyReply, opts: { includeUsage: boolean; signal: AbortSignal; headers: Record<string, string>; toError: (err: unknown) => ApiError }): Promise<void> {
  reply.hijack();
  for (const [k, v] of Object.entries(opts.headers)) reply.raw.setHeader(k, v);
  const sse = new SseStream(reply.raw);
  const base = { id: completionId(call), object: 'chat.completion.chunk', created: Math.floor(call.receivedAt / 1000), model: call.model.name, system_fingerprint: null };
  const chunk = (index: number, delta: Record<string, unknown>, finish: string | null = null, logprobs: unknown = null) => sse.send({ ...base, choices: [{ index, delta, logprobs, finish_reason: finish }] });
  const streamers = call.callIds.map(() => new ContentStreamer({ format: call.model.format, tools: call.tools, toolChoice: call.toolChoice, promptOpensThink: call.plan.promptOpensThink, stop: call.stop }));
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
  try {
    const generations = await calls.generate(call, {
      signal: opts.signal,
      onText: (i, text) => {
        const d = streamers[i].update(text);
        if (d.reasoning !== undefined || d.content) {
          open(i);
          emit(i, d);
        }
      },
    });
    const choices = await calls.record(call, generations);
    for (const c of choices) {
      open(c.index);
      const message = c.reply?.message;
      if (message) emit(c.index, streamers[c.index].finish(message));
      if (message?.tool_calls?.length) {
        chunk(c.index, { tool_calls: message.tool_calls.map((tc, k) => ({ index: k, id: tc.id, type: 'function', function: { name: tc.function.name, arguments: tc.function.arguments } })) });
      }
      const logprobs = call.logprobs ? chatLogprobs(call.model.format.tokenizer, c.generation.outputIds, c.generation.logprobs, call.model.format.stopTokenIds, c.generation.topLogprobs) : null;
      chunk(c.index, {}, c.finishReason, logprobs);
    }
    if (opts.includeUsage) sse.send({ ...base, choices: [], usage: usage(call, choices) });
    sse.done();
  } catch (err) {
    sse.fail(opts.toError(err));
  }
}
