import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

export interface RecordingGateway {
  /** http://127.0.0.1:<port> */
  origin: string;
  port: number;
  /** Everything that reached this server, in order. */
  requests: RecordedRequest[];
  /** A new session: its key and its own base URL, as the admin API would answer. */
  session(): { apiKey: string; baseUrl: string };
  /** Requests that reached a path of this session. */
  requestsOf(apiKey: string): RecordedRequest[];
  close(): Promise<void>;
}

/**
 * A real HTTP server standing in for the gateway in the sandbox's tests: it records every request
 * that reaches it and answers
 *   POST /sessions/<key>/v1/chat/completions   a chat completion naming the path it was called on
 *   GET  /sessions/<key>/v1/stream             SSE: "data: first", then waits for
 *   POST /sessions/<key>/v1/ack                and only then sends "data: second" and [DONE]
 *   anything else                              404 (recorded all the same: reaching it is what a test looks for)
 * The stream/ack pair fails (hangs until the test's wall clock) if anything between the program
 * and this server holds the first event back.
 */
export async function startRecordingGateway(): Promise<RecordingGateway> {
  const requests: RecordedRequest[] = [];
  const waiting: Array<() => void> = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (d: Buffer) => chunks.push(d));
    req.on('end', () => {
      const rec = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      requests.push(rec);
      const m = /^\/sessions\/[^/]+\/v1\/(.*)$/.exec(rec.url.split('?')[0]);
      const route = m?.[1];
      if (route === 'chat/completions' && rec.method === 'POST') {
        const body = JSON.stringify({
          id: 'chatcmpl-test',
          object: 'chat.completion',
          choices: [{ index: 0, message: { role: 'assistant', content: `answered on ${rec.url}` }, finish_reason: 'stop' }],
        });
        res.writeHead(200, { 'content-type': 'application/json' }).end(body);
      } else if (route === 'stream') {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        res.write('data: first\n\n');
        waiting.push(() => res.end('data: second\n\ndata: [DONE]\n\n'));
      } else if (route === 'ack') {
        for (const w of waiting.splice(0)) w();
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      } else {
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}');
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  const origin = `http://127.0.0.1:${port}`;
  return {
    origin,
    port,
    requests,
    session: () => {
      const apiKey = `anvil-sess_${randomBytes(12).toString('base64url')}.${randomBytes(32).toString('base64url')}`;
      return { apiKey, baseUrl: `${origin}/sessions/${apiKey}/v1` };
    },
    requestsOf: (apiKey) => requests.filter((r) => r.url.startsWith(`/sessions/${apiKey}/`)),
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  };
}
