import type { ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';
import type { ApiError } from '@anvil/service-kit';
import type { ChoiceResult } from '../chat/call-service';

/** A streamed answer as the controller drives it: text as it is generated, then the recorded choices (or the error). */
export interface CallStream {
  text(index: number, text: string): void;
  finish(choices: readonly ChoiceResult[]): void;
  fail(error: ApiError): void;
}

/**
 * One server-sent-events answer on a raw Node response. The status line goes out with the
 * first event, so a request that fails before anything was generated still gets a proper
 * HTTP error status; after that an error becomes a `data: {"error": ...}` event (what the
 * official SDKs raise as APIError) and the stream ends without [DONE].
 */
export class SseStream {
  private started = false;
  /** Events of this tick not yet written, and whether their write is scheduled. */
  private pending = '';
  private flushScheduled = false;

  constructor(private readonly raw: ServerResponse) {}

  get closed(): boolean {
    return this.raw.destroyed || this.raw.writableEnded;
  }

  send(data: unknown): void {
    this.start();
    this.write(`data: ${JSON.stringify(data)}\n\n`);
  }

  done(): void {
    this.start();
    this.endWith('data: [DONE]\n\n');
  }

  /** A named event (`event: <name>`), as the Responses and Messages APIs stream them. */
  event(name: string, data: unknown): void {
    this.start();
    this.write(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  /**
   * Events written in the same tick leave as one write of one string: a Responses or Messages
   * answer is a burst of small events (item added, part added, deltas, done, completed), each of
   * which would otherwise be its own packet and syscall, or (corked) its own chunk of a writev,
   * converted and tracked one by one.
   */
  private write(text: string): void {
    if (this.closed) return;
    this.pending += text;
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    process.nextTick(() => this.flush());
  }

  private flush(): void {
    this.flushScheduled = false;
    const out = this.pending;
    this.pending = '';
    if (out && !this.closed) this.raw.write(out);
  }

  /** Ends the answer with what this tick still holds, then `last`. */
  private endWith(last = ''): void {
    const out = this.pending + last;
    this.pending = '';
    if (this.closed) return;
    if (out) this.raw.end(out);
    else this.raw.end();
  }

  /** Ends a stream of named events (those APIs send no [DONE]). */
  end(): void {
    this.start();
    this.endWith();
  }

  /**
   * fail() for APIs with their own error bodies: before the first event, `status` with `body`
   * as JSON; after it, the named events `last` (each [name, data]) end the stream.
   */
  failWith(status: number, headers: Record<string, string>, body: unknown, last: [string, unknown][]): void {
    if (this.closed) return;
    if (!this.started) {
      this.raw.writeHead(status, { 'content-type': 'application/json', ...headers });
      this.raw.end(JSON.stringify(body));
      return;
    }
    this.endWith(last.map(([name, data]) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`).join(''));
  }

  fail(error: ApiError): void {
    if (this.closed) return;
    if (!this.started) {
      this.raw.writeHead(error.status, { 'content-type': 'application/json', ...error.headers });
      this.raw.end(JSON.stringify(error.body()));
      return;
    }
    this.endWith(`data: ${JSON.stringify(error.body())}\n\n`);
  }

  private start(): void {
    if (this.started) return;
    this.started = true;
    this.raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
  }
}

/** Takes a reply over for a stream (Fastify sends nothing more), with `headers` set before the first event. */
export function hijackForStream(reply: FastifyReply, headers: Record<string, string>): SseStream {
  reply.hijack();
  for (const [k, v] of Object.entries(headers)) reply.raw.setHeader(k, v);
  return new SseStream(reply.raw);
}
