import { describe, expect, it } from 'vitest';
import { sseData } from './http-stream';

const stream = (...parts: string[]) =>
  new ReadableStream<Uint8Array>({
    start(c) {
      for (const p of parts) c.enqueue(new TextEncoder().encode(p));
      c.close();
    },
  });

describe('sseData', () => {
  it('yields data payloads split across reads, CRLF lines, comments and multi-line data', async () => {
    const out: string[] = [];
    for await (const d of sseData(stream(': keep-alive\n\ndata: {"a"', ':1}\r\n\r\nevent: x\ndata: line1\ndata: line2\n\n', 'data: [DONE]\n\n'))) out.push(d);
    expect(out).toEqual(['{"a":1}', 'line1\nline2', '[DONE]']);
  });
});

describe('openStream', () => {
  it('retries once on a fresh connection when the server closed the one it sent on without answering', async () => {
    const { createServer } = await import('node:http');
    const { openStream: open } = await import('./http-stream');
    let requests = 0;
    const server = createServer((req, res) => {
      requests++;
      if (requests === 1) return void req.socket.destroy(); // the keep-alive race: closed, nothing answered
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end('data: ok\n\n');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as import('node:net').AddressInfo;
    try {
      const out: string[] = [];
      for await (const d of sseData(await open('engine', `http://127.0.0.1:${port}/x`, {}, new AbortController().signal))) out.push(d);
      expect(out).toEqual(['ok']);
      expect(requests).toBe(2);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
