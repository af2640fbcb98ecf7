import { Agent as HttpAgent, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';

export interface PostResult {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

export class RequestTimeoutError extends Error {
  override readonly name = 'TimeoutError';
}

/**
 * POST of a JSON body over node:http with keep-alive agents. The white-box loops live in the
 * manager's process and make every policy call through here: fetch (undici with WHATWG streams,
 * a combined AbortSignal per call) was a third of the process's CPU when a thousand loops
 * started at once (profiled), and the manager's own bookkeeping waited behind it.
 */
export class HttpPoster {
  private readonly http = new HttpAgent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 1024 });
  private readonly https = new HttpsAgent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 1024 });

  post(url: string, body: string, headers: Record<string, string>, opts: { timeoutMs: number; signal?: AbortSignal }): Promise<PostResult> {
    return new Promise((resolve, reject) => {
      if (opts.signal?.aborted) return reject(abortError(opts.signal));
      const u = new URL(url);
      const send = u.protocol === 'https:' ? httpsRequest : httpRequest;
      const req = send(u, {
        method: 'POST',
        agent: u.protocol === 'https:' ? this.https : this.http,
        headers: { ...headers, 'content-length': Buffer.byteLength(body) },
      });
      let settled = false;
      const finish = (err: Error | null, value?: PostResult) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
        if (err) {
          req.destroy();
          reject(err);
        } else resolve(value as PostResult);
      };
      const onAbort = () => finish(abortError(opts.signal as AbortSignal));
      const timer = setTimeout(() => finish(new RequestTimeoutError(`no answer within ${opts.timeoutMs} ms`)), opts.timeoutMs);
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      req.on('error', (err) => finish(err));
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (d: Buffer) => chunks.push(d));
        res.on('error', (err) => finish(err));
        res.on('end', () =>
          finish(null, { status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }),
        );
      });
      req.end(body);
    });
  }
}

function abortError(signal: AbortSignal): Error {
  const e = new Error(`aborted: ${String(signal.reason)}`);
  e.name = 'AbortError';
  return e;
}
