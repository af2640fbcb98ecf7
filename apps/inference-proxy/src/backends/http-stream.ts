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
export async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffer = '';
  let data: string[] = [];
  for await (const bytes of body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(bytes, { stream: true });
    let nl: number;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).replace(/\r$/, '');
      buffer = buffer.slice(nl + 1);
      if (line === '') {
        if (data.length) yield data.join('\n');
        data = [];
      } else if (line.startsWith('data:')) {
        data.push(line.slice(5).replace(/^ /, ''));
      }
      // Comments (":") and other fields (event, id, retry) carry nothing we use.
    }
  }
  if (data.length) yield data.join('\n');
}

/** Opens a streaming POST; maps connection failures and HTTP errors onto the backend errors. */
export async function openStream(backendId: string, url: string, body: unknown, signal: AbortSignal): Promise<ReadableStream<Uint8Array>> {
  let res: Response;
  try {
    res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify(body), signal });
  } catch (err) {
    if (signal.aborted) throw err;
    throw new BackendUnavailableError(backendId, `POST ${new URL(url).pathname} failed: ${(err as Error).message}`, { cause: err });
  }
  if (!res.ok || !res.body) {
    const text = await res.text().catch(() => '');
    const message = `POST ${new URL(url).pathname} answered ${res.status}: ${text.slice(0, 500)}`;
    throw res.status >= 500 || res.status === 0 ? new BackendUnavailableError(backendId, message) : new BackendRequestError(backendId, res.status, message);
  }
  return res.body;
}

export const trimSlash = (url: string) => url.replace(/\/+$/, '');
