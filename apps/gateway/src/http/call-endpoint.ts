import type { FastifyReply } from 'fastify';
import type { Logger } from '@anvil/observability';
import type { ApiError, ErrorFilterOptions } from '@anvil/service-kit';
import type { CallHooks, CallRequest, CallService, ChoiceResult } from '../chat/call-service';
import type { PreparedCall } from '../chat/prepared-call';
import { GatewayError } from '../errors';
import type { InFlightCalls } from '../lifecycle/in-flight';
import type { GatewayMetrics } from '../metrics';
import { toHttpError } from './http-errors';

/** An error as one API's clients expect it: status, headers, body. */
export type ErrorShape = (error: ApiError) => { status: number; headers: Record<string, string>; body: unknown };

/** OpenAI's `{error: {message, type, param, code}}` (chat completions, completions, Responses). */
export const openAiErrorShape: ErrorShape = (e) => ({ status: e.status, headers: e.headers, body: e.body() });

/** What a streamed answer must take while the call runs: each choice's text as it grows, and the failure. */
export interface TextStream {
  text(index: number, text: string): void;
  fail(error: ApiError): void;
}

/** One API's side of a call: how its request becomes a CallRequest, and how the recorded call is answered. */
export interface EndpointSpec<S extends TextStream> {
  /** Metrics label. */
  route: string;
  shape: ErrorShape;
  /** The call request (may look things up first; GatewayErrors are answered in this API's shape). */
  request(): Promise<Omit<CallRequest, 'receivedAt' | 'signal'>>;
  /** Session state recorded with the call (CallHooks.sessionState). */
  sessionState?: CallHooks['sessionState'];
  /** The stream of a prepared call that asked for one (opened before generation starts). */
  openStream(call: PreparedCall): S;
  /** Answers the recorded call, through `stream` when there is one; `gone`: the client hung up (recorded, nobody listening). */
  complete(call: PreparedCall, choices: ChoiceResult[], stream: S | null, gone: boolean): Promise<void> | void;
}

/**
 * The HTTP side every agent API shares: in-flight accounting (SIGTERM drains), the client
 * hanging up aborting its generation, the call through CallService.answer (recorded durably
 * before it is answered), call metrics, and every failure answered in the API's own error shape
 * (as a status before anything was streamed, as the API's error events after).
 */
export class CallEndpoint {
  constructor(
    private readonly calls: CallService,
    private readonly inFlight: InFlightCalls,
    private readonly metrics: GatewayMetrics,
    private readonly errorOptions: ErrorFilterOptions,
    private readonly logger: Logger,
  ) {}

  async run<S extends TextStream>(reply: FastifyReply, spec: EndpointSpec<S>): Promise<void> {
    const receivedAt = Date.now();
    const release = this.inFlight.enter();
    if (!release)
      return this.fail(
        reply,
        spec.shape,
        this.toError(new GatewayError('unavailable', 'the gateway is shutting down; retry', 'shutting_down')),
      );
    this.metrics.inFlight.inc();
    // The agent hanging up aborts its generation (nothing is answered, so nothing is recorded).
    const gone = new AbortController();
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) gone.abort();
    });
    let stream: S | null = null;
    try {
      const request = await spec.request();
      const { call, choices } = await this.calls.answer(
        { ...request, receivedAt, signal: gone.signal },
        {
          prepared: (prepared) => {
            if (!prepared.stream) return;
            const s = spec.openStream(prepared);
            stream = s;
            return (index, text) => s.text(index, text);
          },
          ...(spec.sessionState ? { sessionState: spec.sessionState } : {}),
        },
      );
      this.metrics.callSeconds.observe({ route: spec.route, stream: String(call.stream) }, (Date.now() - receivedAt) / 1000);
      await spec.complete(call, choices, stream, gone.signal.aborted);
    } catch (err) {
      const error = this.toError(err);
      if (stream) (stream as S).fail(error);
      else this.fail(reply, spec.shape, error);
    } finally {
      this.metrics.inFlight.dec();
      release();
    }
  }

  toError(err: unknown): ApiError {
    const e = toHttpError(err, this.errorOptions);
    if (e.status >= 500 && !(err instanceof GatewayError)) this.logger.error('call failed', { err });
    return e;
  }

  fail(reply: FastifyReply, shape: ErrorShape, error: ApiError): void {
    if (reply.sent || reply.raw.headersSent || reply.raw.destroyed) return;
    const { status, headers, body } = shape(error);
    void reply.status(status).headers(headers).send(body);
  }
}

/** Where the call landed in the capture, for agents' and tests' bookkeeping (never a secret). */
export const captureHeaders = (call: PreparedCall): Record<string, string> => ({
  'x-anvil-call-ids': call.callIds.join(','),
  'x-anvil-branch-id': call.branchId,
  'x-anvil-capture': call.plan.parent ? `extend:${call.plan.parent.callId}` : `branch:${call.plan.branchCause}`,
});

export function toolCallIssueHeader(choices: readonly ChoiceResult[]): Record<string, string> {
  const issue = choices.find((c) => c.reply?.toolCallIssue)?.reply?.toolCallIssue;
  return issue ? { 'x-anvil-tool-call-issue': issue.replace(/[^\x20-\x7e]/g, '?').slice(0, 300) } : {};
}
