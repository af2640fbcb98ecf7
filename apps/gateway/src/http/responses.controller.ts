import { Controller, Get, Inject, Param, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ignoredToolsHeader, type ChatFormMessage } from '../adapters/chat-form';
import { sessionIdOfKey } from '../auth/api-key';
import { bearer, type SessionAuthenticator } from '../auth/session-auth';
import { GatewayError } from '../errors';
import { describeSchemaError } from '../openai/chat-request';
import { storedResponseRow, type ResponseStore } from '../responses/response-store';
import { referencedItems, resolveReferences, toChatForm, type ResponsesInput } from '../responses/responses-input';
import { responseEcho, responseIds, responseObject, type ResponseEcho, type ResponseObject } from '../responses/responses-output';
import { responsesRequestSchema } from '../responses/responses-request';
import { openResponsesStream, type ResponsesStream } from '../responses/responses-sse';
import { CALL_ENDPOINT, RESPONSE_STORE, SESSION_AUTH } from '../tokens';
import { captureHeaders, openAiErrorShape, toolCallIssueHeader, type CallEndpoint } from './call-endpoint';
import { routes } from './openai.controller';

/**
 * The OpenAI Responses API: POST responses (JSON or the documented SSE event sequence) and GET
 * responses/:id. A thin adapter: input items become the call service's chat form
 * (responses-input.ts), the recorded call becomes a response object (responses-output.ts). With
 * `store` (the default) the response is kept in the session's state, so a follow-up naming it in
 * previous_response_id continues its conversation, on any gateway instance.
 */
@Controller()
export class ResponsesController {
  constructor(
    @Inject(SESSION_AUTH) private readonly auth: SessionAuthenticator,
    @Inject(CALL_ENDPOINT) private readonly endpoint: CallEndpoint,
    @Inject(RESPONSE_STORE) private readonly store: ResponseStore,
  ) {}

  @Post(routes('responses'))
  async create(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('sessionKey') sessionKey?: string): Promise<void> {
    const authorization = req.headers.authorization;
    let input: ResponsesInput | undefined;
    let echo: ResponseEcho | undefined;
    let response: ResponseObject | undefined;
    const headers = (extra: Record<string, string>) => ({ ...extra, ...ignoredToolsHeader(input?.ignoredTools ?? []) });
    await this.endpoint.run<ResponsesStream>(reply, {
      route: 'responses',
      shape: openAiErrorShape,
      request: async () => {
        try {
          const parsed = responsesRequestSchema.safeParse(req.body);
          if (!parsed.success) throw describeSchemaError(parsed.error);
          const r = parsed.data;
          const sessionId = claimedSession(authorization, sessionKey);
          const history = r.previous_response_id ? await this.previous(sessionId, r.previous_response_id, authorization, sessionKey) : [];
          const refs = referencedItems(r.input);
          if (refs.length > 0) r.input = resolveReferences(r.input, sessionId ? await this.store.outputItems(sessionId, refs) : new Map());
          input = toChatForm(r, history);
          echo = responseEcho(r);
        } catch (err) {
          // A bad request with a bad key answers 401 first, as chat completions does.
          if (err instanceof GatewayError && err.kind === 'invalid_request') await this.auth.authenticate(authorization, sessionKey);
          throw err;
        }
        return { kind: 'chat', body: undefined, chat: input.chat, authorization, sessionKey };
      },
      openStream: (call) => openResponsesStream(call, echo as ResponseEcho, reply, headers(captureHeaders(call))),
      // The response object is built once, and stored by the statement that records the call.
      sessionState: (call, choices) => {
        const e = echo as ResponseEcho;
        response = responseObject(call, e, choices[0]);
        const message = choices[0].reply?.message;
        if (!e.store || !message) return [];
        const conversation = [...(input as ResponsesInput).added, message as ChatFormMessage];
        const row = { id: responseIds(call).response, sessionId: call.session.id, previousResponseId: e.previousResponseId };
        return [storedResponseRow({ ...row, callId: call.callIds[0], conversation, response })];
      },
      complete: (call, choices, stream, gone) => {
        response ??= responseObject(call, echo as ResponseEcho, choices[0]);
        if (stream) return stream.finish(choices, response);
        if (gone) return;
        void reply
          .status(200)
          .headers(headers({ ...captureHeaders(call), ...toolCallIssueHeader(choices) }))
          .send(response);
      },
    });
  }

  @Get(routes('responses/:id'))
  async get(@Req() req: FastifyRequest, @Param('id') id: string, @Param('sessionKey') sessionKey?: string): Promise<unknown> {
    const session = await this.auth.authenticate(req.headers.authorization, sessionKey);
    const response = await this.store.get(session.id, id);
    if (response === null)
      throw new GatewayError('not_found', `No response found with id '${id.slice(0, 64)}'.`, 'response_not_found', 'response_id');
    return response;
  }

  /**
   * The conversation a previous_response_id continues. Read by the session the key names before
   * the key is checked (the check comes with the call, in one round trip with its capture
   * lookup); nothing read is answered before then, and when nothing is found the key is checked
   * first, so a bad key is told 401, never whether a response exists.
   */
  private async previous(
    sessionId: string | null,
    id: string,
    authorization: string | undefined,
    sessionKey: string | undefined,
  ): Promise<ChatFormMessage[]> {
    const found = sessionId ? await this.store.conversation(sessionId, id) : null;
    if (found) return found;
    await this.auth.authenticate(authorization, sessionKey);
    throw GatewayError.invalid(
      `Previous response with id '${id.slice(0, 64)}' not found.`,
      'previous_response_id',
      'previous_response_not_found',
    );
  }
}

/** The session a request's key names (stored responses are read by it; the key itself is checked with the call). */
function claimedSession(authorization: string | undefined, sessionKey: string | undefined): string | null {
  const key = sessionKey ?? bearer(authorization);
  return key ? sessionIdOfKey(key) : null;
}
