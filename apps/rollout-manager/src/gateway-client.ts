import {
  budgetSpentResponseSchema,
  closeSessionsResponseSchema,
  createSessionResponseSchema,
  createSessionsResponseSchema,
  sessionStateSchema,
  type CreateSessionRequest,
  type CreateSessionResponse,
  type SessionCalls,
  type SessionState,
} from '@anvil/contracts';
import { Coalescer } from './coalescer';
import { HttpPoster } from './http-post';
import type { ChatMessage, ToolSpec } from './environments/types';

export class GatewayError extends Error {
  override readonly name = 'GatewayError';
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | null,
    readonly retryAfterMs: number | null = null,
  ) {
    super(message);
  }
}

/** A session's final state, with its recorded calls when they were asked for. */
export type ClosedSession = SessionState & { calls?: SessionCalls['calls'] };

export interface ChatCompletion {
  message: ChatMessage;
  finishReason: string;
  callId: string | null;
  capture: string | null;
  promptTokens: number;
  completionTokens: number;
}

export interface ChatRequest {
  messages: ChatMessage[];
  tools?: ToolSpec[];
  maxTokens?: number;
  temperature?: number;
  seed?: number;
}

/**
 * The gateway as the rollout manager sees it: the admin session API (its own credential) and,
 * for white-box agents, the agent-facing chat API under a session's base URL (the same door a
 * black-box agent uses, so what is recorded is exactly what the policy saw).
 */
export class GatewayClient {
  private readonly opening = new Coalescer<CreateSessionRequest, CreateSessionResponse>((reqs) => this.createSessions(reqs));
  private readonly poster = new HttpPoster();
  private readonly closing = new Coalescer<string, ClosedSession | null>(async (ids) =>
    (await this.closeSessions(ids, false)).map((value) => ({ status: 'fulfilled', value })),
  );
  private readonly closingWithCalls = new Coalescer<string, ClosedSession | null>(async (ids) =>
    (await this.closeSessions(ids, true)).map((value) => ({ status: 'fulfilled', value })),
  );

  constructor(
    readonly url: string,
    private readonly adminToken: string,
    private readonly opts: { requestTimeoutMs: number; model: string } = { requestTimeoutMs: 120_000, model: 'anvil-tiny' },
  ) {}

  /** Opens a session together with the others asked for in the same tick (one admin request, one statement at the gateway). */
  openSession(req: CreateSessionRequest): Promise<CreateSessionResponse> {
    return this.opening.push(req);
  }

  /**
   * Closes a session together with the others in the same tick; its final state (with
   * `withCalls`, also its recorded calls, read after the close), or null when the gateway does
   * not know it.
   */
  closeSessionBatched(sessionId: string, withCalls = false): Promise<ClosedSession | null> {
    return (withCalls ? this.closingWithCalls : this.closing).push(sessionId);
  }

  /** Many sessions in one request, answered in order. A refused batch (4xx: a bad entry) is opened one by one, so only the bad ones fail. */
  async createSessions(reqs: CreateSessionRequest[]): Promise<PromiseSettledResult<CreateSessionResponse>[]> {
    if (reqs.length > 1) {
      try {
        const { sessions } = createSessionsResponseSchema.parse(
          await this.admin('/admin/v1/sessions/batch', { method: 'POST', body: JSON.stringify({ sessions: reqs }) }),
        );
        return sessions.map((value) => ({ status: 'fulfilled', value }));
      } catch (err) {
        if (!(err instanceof GatewayError) || err.status >= 500) throw err;
      }
    }
    return Promise.allSettled(reqs.map((r) => this.createSession(r)));
  }

  /** Closes many (idempotent); the state of each (and its calls, `withCalls`), null for ids the gateway does not know. */
  async closeSessions(ids: string[], withCalls: boolean): Promise<(ClosedSession | null)[]> {
    const { sessions } = closeSessionsResponseSchema.parse(
      await this.admin('/admin/v1/sessions/batch/close', {
        method: 'POST',
        body: JSON.stringify({ sessionIds: ids, ...(withCalls ? { withCalls } : {}) }),
      }),
    );
    const byId = new Map(sessions.map((s) => [s.sessionId, s]));
    return ids.map((id) => byId.get(id) ?? null);
  }

  /** Of `sessionIds`, those that have had a call refused over their call budget (unknown ids are left out). */
  async budgetSpent(sessionIds: string[]): Promise<string[]> {
    const { sessions } = budgetSpentResponseSchema.parse(
      await this.admin('/admin/v1/sessions/batch/budget-spent', { method: 'POST', body: JSON.stringify({ sessionIds }) }),
    );
    return sessions.map((s) => s.sessionId);
  }

  get model(): string {
    return this.opts.model;
  }

  private async admin(path: string, init: RequestInit): Promise<unknown> {
    const res = await fetch(`${this.url}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${this.adminToken}`, 'content-type': 'application/json' },
      signal: AbortSignal.timeout(this.opts.requestTimeoutMs),
    });
    const text = await res.text();
    if (!res.ok) throw new GatewayError(`gateway ${init.method ?? 'GET'} ${path}: ${res.status} ${text.slice(0, 500)}`, res.status, null);
    return JSON.parse(text) as unknown;
  }

  async createSession(req: CreateSessionRequest): Promise<CreateSessionResponse> {
    return createSessionResponseSchema.parse(await this.admin('/admin/v1/sessions', { method: 'POST', body: JSON.stringify(req) }));
  }

  /** Idempotent on the gateway side. */
  async closeSession(sessionId: string): Promise<SessionState> {
    return sessionStateSchema.parse(
      await this.admin(`/admin/v1/sessions/${encodeURIComponent(sessionId)}/close`, { method: 'POST', body: '{}' }),
    );
  }

  async session(sessionId: string): Promise<SessionState> {
    return sessionStateSchema.parse(await this.admin(`/admin/v1/sessions/${encodeURIComponent(sessionId)}`, { method: 'GET' }));
  }

  /** One chat call through a session's base URL (the key is its path segment). */
  async chat(baseUrl: string, req: ChatRequest, signal?: AbortSignal): Promise<ChatCompletion> {
    const body: Record<string, unknown> = { model: this.opts.model, messages: req.messages };
    if (req.tools?.length) body.tools = req.tools;
    if (req.maxTokens !== undefined) body.max_tokens = req.maxTokens;
    if (req.temperature !== undefined) body.temperature = req.temperature;
    if (req.seed !== undefined) body.seed = req.seed;
    const res = await this.poster.post(
      `${baseUrl}/chat/completions`,
      JSON.stringify(body),
      { 'content-type': 'application/json', authorization: 'Bearer session-url' },
      { timeoutMs: this.opts.requestTimeoutMs, signal },
    );
    const text = res.text;
    if (res.status < 200 || res.status >= 300) {
      let code: string | null = null;
      try {
        code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? null;
      } catch {
        /* not JSON */
      }
      // retry-after-ms (the rate limit's exact wait) before Retry-After (whole seconds), as the official SDKs read them.
      const raMs = Number(header(res.headers['retry-after-ms']));
      const ra = Number(res.headers['retry-after']);
      throw new GatewayError(
        `chat: ${res.status} ${text.slice(0, 500)}`,
        res.status,
        code,
        Number.isFinite(raMs) && raMs > 0 ? raMs : Number.isFinite(ra) && ra > 0 ? ra * 1000 : null,
      );
    }
    const json = JSON.parse(text) as {
      choices: { message: { content: string | null; tool_calls?: ChatMessage['tool_calls'] }; finish_reason: string }[];
      usage?: { prompt_tokens?: number; completion_tokens?: number };
    };
    const choice = json.choices[0];
    const message: ChatMessage = { role: 'assistant', content: choice.message.content ?? null };
    if (choice.message.tool_calls?.length)
      message.tool_calls = choice.message.tool_calls.map((c) => ({
        id: c.id,
        type: 'function',
        function: { name: c.function.name, arguments: c.function.arguments },
      }));
    return {
      message,
      finishReason: choice.finish_reason,
      callId: header(res.headers['x-anvil-call-ids'])?.split(',')[0] ?? null,
      capture: header(res.headers['x-anvil-capture']),
      promptTokens: json.usage?.prompt_tokens ?? 0,
      completionTokens: json.usage?.completion_tokens ?? 0,
    };
  }
}

function header(v: string | string[] | undefined): string | null {
  return v === undefined ? null : Array.isArray(v) ? v.join(',') : v;
}
