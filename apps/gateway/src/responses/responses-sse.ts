import type { FastifyReply } from 'fastify';
import type { ApiError } from '@anvil/service-kit';
import type { ChoiceResult } from '../chat/call-service';
import type { PreparedCall } from '../chat/prepared-call';
import { ContentStreamer } from '../sse/content-streamer';
import { hijackForStream, type CallStream } from '../sse/sse-stream';
import { outputItems, responseIds, responseObject, type ResponseEcho, type ResponseObject } from './responses-output';

/** A streamed response: `finish` takes the recorded choice and the response object the client gets (already stored when `store`). */
export interface ResponsesStream extends Omit<CallStream, 'finish'> {
  finish(choices: readonly ChoiceResult[], response: ResponseObject): void;
}

/**
 * A streamed response (`stream: true`) as OpenAI's documented event sequence, every event with
 * its sequence_number: response.created, response.in_progress, then per output item
 * output_item.added, its content (reasoning_text / output_text deltas inside
 * content_part.added ... content_part.done, or function_call_arguments.delta/done),
 * output_item.done, and response.completed (or response.incomplete at the token limit). Text is
 * streamed as it becomes safe to send (ContentStreamer: what may still turn out to be a tool call
 * or reasoning is held back); function calls go out once the call is recorded, since only then
 * is it certain they parse. If recording fails the stream ends with response.failed and an error
 * event (which the SDKs raise) instead.
 */
export function openResponsesStream(
  call: PreparedCall,
  echo: ResponseEcho,
  reply: FastifyReply,
  headers: Record<string, string>,
): ResponsesStream {
  const sse = hijackForStream(reply, headers);
  const ids = responseIds(call);
  let seq = 0;
  const send = (type: string, data: Record<string, unknown>) => sse.event(type, { type, sequence_number: seq++, ...data });
  const streamer = ContentStreamer.forCall(call);
  let started = false;
  let index = 0;
  let messageOpen = false;
  const start = () => {
    if (started) return;
    started = true;
    const shell = responseObject(call, echo);
    send('response.created', { response: shell });
    send('response.in_progress', { response: shell });
  };
  const reasoningItem = (text: string) => {
    const item = { type: 'reasoning', id: ids.reasoning, summary: [] };
    const where = { item_id: ids.reasoning, output_index: index };
    send('response.output_item.added', { output_index: index, item: { ...item, content: [] } });
    send('response.content_part.added', { ...where, content_index: 0, part: { type: 'reasoning_text', text: '' } });
    send('response.reasoning_text.delta', { ...where, content_index: 0, delta: text });
    send('response.reasoning_text.done', { ...where, content_index: 0, text });
    send('response.content_part.done', { ...where, content_index: 0, part: { type: 'reasoning_text', text } });
    send('response.output_item.done', { output_index: index, item: { ...item, content: [{ type: 'reasoning_text', text }] } });
    index++;
  };
  const openMessage = () => {
    if (messageOpen) return;
    messageOpen = true;
    send('response.output_item.added', {
      output_index: index,
      item: { type: 'message', id: ids.message, status: 'in_progress', role: 'assistant', content: [] },
    });
    send('response.content_part.added', {
      item_id: ids.message,
      output_index: index,
      content_index: 0,
      part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
    });
  };
  const textDelta = (delta: string) => {
    openMessage();
    send('response.output_text.delta', { item_id: ids.message, output_index: index, content_index: 0, delta, logprobs: [] });
  };
  const emit = (d: { reasoning?: string; content?: string }) => {
    if (d.reasoning !== undefined) reasoningItem(d.reasoning);
    if (d.content) textDelta(d.content);
  };
  return {
    text(_i, text) {
      const d = streamer.update(call.forcedText + text);
      if (d.reasoning === undefined && !d.content) return;
      start();
      emit(d);
    },
    finish(choices, response) {
      start();
      const message = choices[0].reply?.message;
      if (message) {
        emit(streamer.finish(message));
        const items = outputItems(message, ids);
        for (const item of items) {
          if (item.type === 'reasoning') continue; // sent above
          if (item.type === 'message') {
            openMessage();
            const part = item.content[0];
            const where = { item_id: ids.message, output_index: index, content_index: 0 };
            send('response.output_text.done', { ...where, text: part.text, logprobs: [] });
            send('response.content_part.done', { ...where, part });
            send('response.output_item.done', { output_index: index, item });
            index++;
            continue;
          }
          send('response.output_item.added', { output_index: index, item: { ...item, arguments: '', status: 'in_progress' } });
          const where = { item_id: item.id, output_index: index };
          send('response.function_call_arguments.delta', { ...where, delta: item.arguments });
          send('response.function_call_arguments.done', { ...where, name: item.name, arguments: item.arguments });
          send('response.output_item.done', { output_index: index, item });
          index++;
        }
      }
      send(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response });
      sse.end();
    },
    fail(error: ApiError) {
      const body = error.body();
      const failed = {
        ...responseObject(call, echo),
        status: 'failed',
        error: { code: body.error.code ?? 'server_error', message: body.error.message },
      };
      sse.failWith(error.status, error.headers, body, [
        ['response.failed', { type: 'response.failed', sequence_number: seq++, response: failed }],
        [
          'error',
          { type: 'error', sequence_number: seq++, code: body.error.code, message: body.error.message, param: body.error.param, ...body },
        ],
      ]);
    },
  };
}
