import type { ServerResponse } from 'node:http';
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

  constructor(private readonly raw: ServerResponse) {}

  get closed(): boolean {
    return this.raw.destroyed || this.raw.writableEnded;
  }

  send(data: unknown): void {
    this.start();
    if (!this.closed) this.raw.write(`data: ${JSON.stringify(data)}\n\n`);
  }

  done(): void {
    this.start();
    if (!this.closed) this.raw.end('data: [DONE]\n\n');
  }

  fail(error: ApiError): void {
    if (this.closed) return;
    if (!this.started) {
      this.raw.writeHead(error.status, { 'content-type': 'application/json', ...error.headers });
      this.raw.end(JSON.stringify(error.body()));
      return;
    }
    this.raw.end(`data: ${JSON.stringify(error.body())}\n\n`);
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
