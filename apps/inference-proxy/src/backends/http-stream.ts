import type { Readable } from 'node:stream';
import { Agent, request, type Dispatcher } from 'undici';
import { BackendRequestError, BackendUnavailableError } from './backend';

/**
 * HTTP plumbing shared by the external engine clients: JSON POSTs with a deadline, and a
 * server-sent-events reader over fetch's body stream. Aborting the fetch closes the
 * connection, which is how both vLLM and SGLang learn that a client went away.
 */

export async function postJson(backendId: string, url: string, body: unknown, opts: { timeoutMs: number; signal?: AbortSignal }): Promise<unknown> {
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
  return text ? JSON.parse(text) : null;
}

/** Yields each `data:` payload of an SSE stream (multi-line data joined with \n). */
export async function* sseData(body: AsyncIterable<Uint8Array | string>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffer = '';
  let data: string[] = [];
  for await (const bytes of body) {
    buffer += typeof bytes === 'string' ? bytes : decoder.decode(bytes, { stream: true });
    let nl: number;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.charCodeAt(nl - 1) === 13 ? buffer.slice(0, nl - 1) : buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      if (line === '') {
        if (data.length) yield data.length === 1 ? data[0] : data.join('\n');
        data = [];
      } else if (line.startsWith('data:')) {
        data.push(line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5));
      }
      // Comments (":") and other fields (event, id, retry) carry nothing we use.
    }
  }
  if (data.length) yield data.join('\n');
}

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
  const post = () => request(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: payload, signal, dispatcher: engineConnections });
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
    throw res.statusCode >= 500 ? new BackendUnavailableError(backendId, message) : new BackendRequestError(backendId, res.statusCode, message);
  }
  res.body.setEncoding('utf8');
  return res.body;
}

export const trimSlash = (url: string) => url.replace(/\/+$/, '');
