import type { FastifyReply } from 'fastify';
import type { ApiError } from '@anvil/service-kit';
import type { ChoiceResult } from '../chat/call-service';
import type { PreparedCall } from '../chat/prepared-call';
import { ContentStreamer } from '../sse/content-streamer';
import { hijackForStream, type CallStream } from '../sse/sse-stream';
import { anthropicErrorShape } from './anthropic-errors';
import { contentBlocks, messageId, messagesUsage, stopReason } from './messages-output';

/** How often a ping keeps a quiet stream alive (Anthropic sends them while the model thinks). */
const PING_MS = 10_000;

/**
 * A streamed message (`stream: true`) as Anthropic's event sequence: message_start, ping, per
 * content block content_block_start, its deltas (thinking_delta, text_delta, input_json_delta),
 * content_block_stop, then message_delta (stop_reason, stop_sequence, usage) and message_stop.
 * Text is streamed as it becomes safe to send (ContentStreamer: what may still turn out to be a
 * tool call or thinking is held back); tool_use blocks go out once the call is recorded. If
 * recording fails the stream ends with an `error` event (which the SDKs raise) instead.
 */
export function openMessagesStream(call: PreparedCall, reply: FastifyReply, headers: Record<string, string>): CallStream {
  const sse = hijackForStream(reply, headers);
  const send = (type: string, data: Record<string, unknown> = {}) => sse.event(type, { type, ...data });
  const streamer = ContentStreamer.forCall(call);
  let started = false;
  let index = 0;
  let textOpen = false;
  const start = () => {
    if (started) return;
    started = true;
    send('message_start', {
      message: {
        id: messageId(call),
        type: 'message',
        role: 'assistant',
        model: call.model.name,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: messagesUsage(call),
      },
    });
    send('ping');
  };
  const ping = setInterval(() => {
    if (started && !sse.closed) send('ping');
  }, PING_MS);
  ping.unref();
  const thinking = (text: string) => {
    send('content_block_start', { index, content_block: { type: 'thinking', thinking: '', signature: '' } });
    send('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: text } });
    send('content_block_delta', { index, delta: { type: 'signature_delta', signature: '' } });
    send('content_block_stop', { index });
    index++;
  };
  const openText = () => {
    if (textOpen) return;
    textOpen = true;
    send('content_block_start', { index, content_block: { type: 'text', text: '' } });
  };
  const emit = (d: { reasoning?: string; content?: string }) => {
    if (d.reasoning !== undefined) thinking(d.reasoning);
    if (d.content) {
      openText();
      send('content_block_delta', { index, delta: { type: 'text_delta', text: d.content } });
    }
  };
  return {
    text(_i, text) {
      const d = streamer.update(call.forcedText + text);
      if (d.reasoning === undefined && !d.content) return;
      start();
      emit(d);
    },
    finish(choices: readonly ChoiceResult[]) {
      clearInterval(ping);
      start();
      const c = choices[0];
      const message = c.reply?.message;
      if (message) {
        emit(streamer.finish(message));
        for (const block of contentBlocks(message)) {
          if (block.type === 'thinking') continue; // sent above
          if (block.type === 'text') {
            openText();
            send('content_block_stop', { index });
            index++;
            continue;
          }
          send('content_block_start', { index, content_block: { ...block, input: {} } });
          send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) } });
          send('content_block_stop', { index });
          index++;
        }
      }
      send('message_delta', { delta: stopReason(c), usage: { output_tokens: c.generation.outputIds.length } });
      send('message_stop');
      sse.end();
    },
    fail(error: ApiError) {
      clearInterval(ping);
      const { status, headers: h, body } = anthropicErrorShape(error);
      sse.failWith(status, h, body, [['error', body]]);
    },
  };
}
