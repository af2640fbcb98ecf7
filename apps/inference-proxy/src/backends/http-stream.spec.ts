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
