import { describe, expect, it } from 'vitest';
import { Readable } from 'node:stream';
import { readSse, SseParser, sseData } from './http-stream';

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
    for await (const d of sseData(
      stream(': keep-alive\n\ndata: {"a"', ':1}\r\n\r\nevent: x\ndata: line1\ndata: line2\n\n', 'data: [DONE]\n\n'),
    ))
      out.push(d);
    expect(out).toEqual(['{"a":1}', 'line1\nline2', '[DONE]']);
  });
});

/** A stream that delivers only what the test pushes. */
const pending = () => new Readable({ read: () => undefined });

describe('readSse', () => {
  const SAMPLE = [': keep-alive\n\ndata: {"a"', ':1}\r\n\r\nevent: x\ndata: line1\ndata: line2\n\n', 'data: [DONE]\n\n'];

  it('calls back with the same payloads sseData yields', async () => {
    const out: string[] = [];
    await readSse(Readable.from(SAMPLE), (d) => out.push(d));
    expect(out).toEqual(['{"a":1}', 'line1\nline2', '[DONE]']);
  });

  it('decodes a multi-byte character split across Buffer chunks; an event not closed by a blank line ends it, as in sseData', async () => {
    const bytes = Buffer.from('data: é\n\ndata: tail\n');
    const parts = () => [bytes.subarray(0, 7), bytes.subarray(7)];
    const out: string[] = [];
    await readSse(Readable.from(parts()), (d) => out.push(d));
    expect(out).toEqual(['é', 'tail']);
    const reference: string[] = [];
    for await (const d of sseData(Readable.from(parts()))) reference.push(d);
    expect(out).toEqual(reference);
  });

  it('rejects with the stream error, and destroys the stream when the callback throws', async () => {
    const broken = pending();
    const failed = readSse(broken, () => undefined);
    broken.destroy(new Error('connection reset'));
    await expect(failed).rejects.toThrow('connection reset');

    const body = pending();
    body.push('data: 1\n\n');
    await expect(
      readSse(body, () => {
        throw new Error('bad event');
      }),
    ).rejects.toThrow('bad event');
    expect(body.destroyed).toBe(true);
  });

  it('rejects a stream that closes before its end, or was destroyed before reading', async () => {
    const body = pending();
    const reading = readSse(body, () => undefined);
    body.destroy();
    await expect(reading).rejects.toThrow('premature close');
    await expect(readSse(body, () => undefined)).rejects.toThrow('premature close');
  });

  it('SseParser keeps a line split across chunks', () => {
    const parser = new SseParser();
    const out: string[] = [];
    for (const part of ['da', 'ta: x', '\r', '\n', '\n']) parser.push(part, (d) => out.push(d));
    expect(out).toEqual(['x']);
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
