import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { Agent, request, type Dispatcher } from 'undici';
import { BackendRequestError, BackendUnavailableError } from './backend';

/**
 * HTTP plumbing shared by the external engine clients: JSON POSTs with a deadline, and a
 * server-sent-events reader over fetch's body stream. Aborting the fetch closes the
 * connection, which is how both vLLM and SGLang learn that a client went away.
 */

export async function postJson(
  backendId: string,
  url: string,
  body: unknown,
  opts: { timeoutMs: number; signal?: AbortSignal },
): Promise<unknown> {
  const text = await postText(backendId, url, body, opts);
  return text ? JSON.parse(text) : null;
}

/** As postJson, for endpoints that answer plain text (vLLM's LoRA endpoints): the body as text. */
export async function postText(
  backendId: string,
  url: string,
  body: unknown,
  opts: { timeoutMs: number; signal?: AbortSignal },
): Promise<string> {
  const signal = opts.signal ? AbortSignal.any([opts.signal, AbortSignal.timeout(opts.timeoutMs)]) : AbortSignal.timeout(opts.timeoutMs);
  let res: Response;
  try {
    res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal });
  } catch (err) {
    throw new BackendUnavailableError(backendId, `POST ${new URL(url).pathname} failed: ${(err as Error).message}`, { cause: err });
  }
  const text = await res.text();
  if (!res.ok) {
    const message = `POST ${new URL(url).pathname} answered ${res.status}: ${text.slice(0, 500)}`;
    throw res.status >= 500 ? new BackendUnavailableError(backendId, message) : new BackendRequestError(backendId, res.status, message);
  }
  return text;
}

/**
 * Splits an SSE byte stream into `data:` payloads (multi-line data joined with \n), fed one
 * decoded chunk at a time. Shared by sseData (async iteration) and readSse (callbacks).
 */
export class SseParser {
  private buffer = '';
  private data: string[] = [];

  /** Feeds one chunk; calls onData for each event it completes. */
  push(text: string, onData: (data: string) => void): void {
    const buffer = this.buffer + text;
    // Scan with an offset and slice the remainder once per chunk (re-slicing the buffer after
    // every line copies the rest of the chunk once per line).
    let start = 0;
    let nl: number;
    while ((nl = buffer.indexOf('\n', start)) >= 0) {
      const end = nl > start && buffer.charCodeAt(nl - 1) === 13 ? nl - 1 : nl;
      const lineStart = start;
      start = nl + 1;
      if (end === lineStart) {
        if (this.data.length) {
          const data = this.data;
          this.data = [];
          onData(data.length === 1 ? data[0] : data.join('\n'));
        }
      } else if (buffer.startsWith('data:', lineStart)) {
        const from = buffer.charCodeAt(lineStart + 5) === 32 ? lineStart + 6 : lineStart + 5;
        this.data.push(buffer.slice(from, end));
      }
      // Comments (":") and other fields (event, id, retry) carry nothing we use.
    }
    this.buffer = start === 0 ? buffer : buffer.slice(start);
  }

  /** At the end of the stream: the last event when it was not closed by a blank line. */
  finish(onData: (data: string) => void): void {
    if (this.data.length) onData(this.data.join('\n'));
    this.data = [];
  }
}

/** Yields each `data:` payload of an SSE stream (multi-line data joined with \n). */
export async function* sseData(body: AsyncIterable<Uint8Array | string>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const parser = new SseParser();
  const ready: string[] = [];
  const collect = (data: string) => ready.push(data);
  for await (const bytes of body) {
    parser.push(typeof bytes === 'string' ? bytes : decoder.decode(bytes, { stream: true }), collect);
    yield* ready.splice(0);
  }
  parser.finish(collect);
  yield* ready;
}

/**
 * Reads an SSE response body to its end, calling onData for each `data:` payload as its
 * chunk arrives. Event-driven ('data' listeners) rather than an async iterator: a stream of
 * tokens is many small chunks, and each iterator step costs promises and ticks. Rejects when
 * the stream errors (an abort destroys it), closes before its end, or onData throws; the
 * stream is destroyed then, as leaving a for-await loop early would.
 */
export function readSse(body: Readable, onData: (data: string) => void): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const parser = new SseParser();
    // openStream sets utf8, so chunks are strings; a Buffer (encoding not set) is decoded
    // statefully so a character split across chunks survives.
    let decoder: StringDecoder | undefined;
    let settled = false;
    const settle = (err?: unknown) => {
      if (settled) return;
      settled = true;
      body.off('data', onChunk);
      body.off('end', onEnd);
      body.off('error', onError);
      body.off('close', onClose);
      if (err === undefined) resolve();
      else reject(err);
    };
    const fail = (err: unknown) => {
      settle(err);
      body.destroy();
    };
    const onChunk = (chunk: string | Buffer) => {
      try {
        parser.push(typeof chunk === 'string' ? chunk : (decoder ??= new StringDecoder('utf8')).write(chunk), onData);
      } catch (err) {
        fail(err);
      }
    };
    const onEnd = () => {
      try {
        parser.finish(onData);
        settle();
      } catch (err) {
        fail(err);
      }
    };
    const onError = (err: Error) => settle(err);
    const onClose = () => settle(prematureClose());
    // Destroyed before we got to it (an abort between the headers and now): its events are gone.
    if (body.destroyed) return settle(body.errored ?? prematureClose());
    body.on('data', onChunk);
    body.once('end', onEnd);
    body.once('error', onError);
    body.once('close', onClose);
  });
}

const prematureClose = () => Object.assign(new Error('premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' });

/**
 * Keep-alive connections to the engines, shared by every stream: undici's own pool (cheaper per
 * request than fetch's WHATWG streams). No undici deadlines: a generation lasts as long as it
 * lasts; callers bound it with their abort signal.
 */
const engineConnections = new Agent({
  keepAliveTimeout: 4_000,
  // An idle connection is given up 2 s before the server's Keep-Alive hint says it closes it
  // (Node's default 5 s gives 3 s), so a busy event loop rarely reuses a connection the server
  // is closing; openStream retries the one that it does reuse.
  keepAliveTimeoutThreshold: 2_000,
  headersTimeout: 0,
  bodyTimeout: 0,
});

/** Connection errors that mean a kept-alive connection was closed by the server before it read our request. */
const STALE_CONNECTION = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE']);

/** Opens a streaming POST; maps connection failures and HTTP errors onto the backend errors. */
export async function openStream(backendId: string, url: string, body: unknown, signal: AbortSignal): Promise<Readable> {
  let res: Dispatcher.ResponseData;
  const payload = JSON.stringify(body);
  const post = () =>
    request(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: payload,
      signal,
      dispatcher: engineConnections,
    });
  try {
    try {
      res = await post();
    } catch (err) {
      // The server closed a pooled connection as we sent on it (keep-alive race): nothing was
      // answered, so nothing ran; once more on a fresh connection before calling it a failure.
      if (signal.aborted || !STALE_CONNECTION.has((err as { code?: string }).code ?? '')) throw err;
      res = await post();
    }
  } catch (err) {
    if (signal.aborted) throw err;
    throw new BackendUnavailableError(backendId, `POST ${new URL(url).pathname} failed: ${(err as Error).message}`, { cause: err });
  }
  if (res.statusCode < 200 || res.statusCode >= 300) {
    const text = await res.body.text().catch(() => '');
    const message = `POST ${new URL(url).pathname} answered ${res.statusCode}: ${text.slice(0, 500)}`;
    throw res.statusCode >= 500
      ? new BackendUnavailableError(backendId, message)
      : new BackendRequestError(backendId, res.statusCode, message);
  }
  res.body.setEncoding('utf8');
  return res.body;
}

export const trimSlash = (url: string) => url.replace(/\/+$/, '');
