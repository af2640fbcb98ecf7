import { Body, Controller, Get, HttpCode, Inject, Param, Post, Req } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import {
  budgetSpentRequestSchema,
  closeSessionsRequestSchema,
  createSessionRequestSchema,
  createSessionsRequestSchema,
  type BudgetSpentResponse,
  type CloseSessionsResponse,
  type CreateSessionRequest,
  type CreateSessionResponse,
  type CreateSessionsResponse,
  type SessionCalls,
  type SessionState,
} from '@anvil/contracts';
import type { Logger } from '@anvil/observability';
import { LOGGER } from '@anvil/service-kit';
import { assertAdmin } from '../auth/admin-auth';
import { issueKey } from '../auth/api-key';
import type { GatewayConfig } from '../config';
import type { ModelRegistry } from '../models/model-registry';
import { callLimitsOf } from '../sessions/call-limits';
import { sessionState, type NewSession, type SessionStore } from '../sessions/session-store';
import { GATEWAY_CONFIG, MODEL_REGISTRY, SESSION_STORE } from '../tokens';
import { GatewayError } from '../errors';
import { describeSchemaError } from '../openai/chat-request';

/**
 * The admin API the rollout manager uses (credential: GATEWAY_ADMIN_TOKEN as a Bearer token).
 *  POST /admin/v1/sessions            CreateSessionRequest -> {sessionId, apiKey, baseUrl} (201)
 *  POST /admin/v1/sessions/batch      {sessions: CreateSessionRequest[]} -> {sessions: [...]} (201, in order, all or none)
 *  POST /admin/v1/sessions/batch/close {sessionIds, withCalls?} -> {sessions: SessionState[] (+ calls)} (idempotent; unknown ids left out)
 *  POST /admin/v1/sessions/batch/budget-spent {sessionIds} -> {sessions: [{sessionId, callsRefused}]} (those refused a call over their budget)
 *  POST /admin/v1/sessions/:id/close  -> SessionState (idempotent)
 *  GET  /admin/v1/sessions/:id        -> SessionState (status, call and branch counts, ...)
 *  GET  /admin/v1/sessions/:id/calls  -> SessionCalls (the recorded calls in turn order, each with its reply)
 * The API key is shown once, here; only its sha256 is stored.
 */
@Controller('admin/v1/sessions')
export class AdminController {
  constructor(
    @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
    @Inject(MODEL_REGISTRY) private readonly registry: ModelRegistry,
    @Inject(SESSION_STORE) private readonly sessions: SessionStore,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  @Post()
  @HttpCode(201)
  async create(@Req() req: FastifyRequest, @Body() body: unknown): Promise<CreateSessionResponse> {
    assertAdmin(req.headers.authorization, this.config.GATEWAY_ADMIN_TOKEN);
    const parsed = createSessionRequestSchema.safeParse(body);
    if (!parsed.success) throw describeSchemaError(parsed.error);
    const { session, response } = this.newSession(req, parsed.data);
    await this.sessions.create(session);
    this.logger.info('session opened', { sessionId: session.id, rolloutId: session.rolloutId });
    return response;
  }

  /** Many sessions at once, in one statement, answered in order (all or none). */
  @Post('batch')
  @HttpCode(201)
  async createMany(@Req() req: FastifyRequest, @Body() body: unknown): Promise<CreateSessionsResponse> {
    assertAdmin(req.headers.authorization, this.config.GATEWAY_ADMIN_TOKEN);
    const parsed = createSessionsRequestSchema.safeParse(body);
    if (!parsed.success) throw describeSchemaError(parsed.error);
    const made = parsed.data.sessions.map((r) => this.newSession(req, r));
    await this.sessions.createMany(made.map((m) => m.session));
    this.logger.debug('sessions opened', { count: made.length });
    return { sessions: made.map((m) => m.response) };
  }

  /** Closes many (idempotent); answers the state of each session the gateway knows (withCalls: and its recorded calls, read after the close). */
  @Post('batch/close')
  @HttpCode(200)
  async closeMany(@Req() req: FastifyRequest, @Body() body: unknown): Promise<CloseSessionsResponse> {
    assertAdmin(req.headers.authorization, this.config.GATEWAY_ADMIN_TOKEN);
    const parsed = closeSessionsRequestSchema.safeParse(body);
    if (!parsed.success) throw describeSchemaError(parsed.error);
    const closed = await this.sessions.closeMany(parsed.data.sessionIds);
    if (!parsed.data.withCalls) return { sessions: closed.map(sessionState) };
    const calls = await this.sessions.callsOf(closed.map((s) => s.id));
    return { sessions: closed.map((s) => ({ ...sessionState(s), calls: calls.get(s.id) ?? [] })) };
  }

  /** Which sessions' agents asked for more calls than their budget (the rollout manager ends their rollouts). */
  @Post('batch/budget-spent')
  @HttpCode(200)
  async budgetSpent(@Req() req: FastifyRequest, @Body() body: unknown): Promise<BudgetSpentResponse> {
    assertAdmin(req.headers.authorization, this.config.GATEWAY_ADMIN_TOKEN);
    const parsed = budgetSpentRequestSchema.safeParse(body);
    if (!parsed.success) throw describeSchemaError(parsed.error);
    return { sessions: await this.sessions.budgetSpent(parsed.data.sessionIds) };
  }

  /** A checked request's row and its answer (the key, shown once). */
  private newSession(req: FastifyRequest, r: CreateSessionRequest): { session: NewSession; response: CreateSessionResponse } {
    const model = this.registry.get(r.model);
    if (!model) throw GatewayError.modelNotFound(r.model);
    if (r.expiresAt !== undefined && r.expiresAt <= Date.now()) throw GatewayError.invalid('expiresAt is in the past', 'expiresAt');
    const key = issueKey();
    const session: NewSession = {
      id: key.sessionId,
      keyHash: key.keyHash,
      rolloutId: r.rolloutId,
      groupId: r.groupId,
      taskId: r.taskId,
      model: r.model,
      maxContextTokens: r.maxContextTokens ? Math.min(r.maxContextTokens, model.maxContextTokens) : null,
      expiresAt: r.expiresAt ? new Date(r.expiresAt) : null,
      weightSwap: r.weightSwap ?? null,
      ...callLimitsOf(r),
    };
    const base = (
      this.config.GATEWAY_PUBLIC_URL ?? `${req.protocol}://${req.headers.host ?? `${this.config.HOST}:${this.config.PORT}`}`
    ).replace(/\/+$/, '');
    return { session, response: { sessionId: key.sessionId, apiKey: key.apiKey, baseUrl: `${base}/sessions/${key.apiKey}/v1` } };
  }

  @Post(':id/close')
  @HttpCode(200)
  async close(@Req() req: FastifyRequest, @Param('id') id: string): Promise<SessionState> {
    assertAdmin(req.headers.authorization, this.config.GATEWAY_ADMIN_TOKEN);
    const session = await this.sessions.close(id, 'closed');
    if (!session) throw GatewayError.sessionNotFound();
    return sessionState(session);
  }

  @Get(':id/calls')
  async calls(@Req() req: FastifyRequest, @Param('id') id: string): Promise<SessionCalls> {
    assertAdmin(req.headers.authorization, this.config.GATEWAY_ADMIN_TOKEN);
    const session = await this.sessions.find(id);
    if (!session) throw GatewayError.sessionNotFound();
    return { sessionId: id, calls: await this.sessions.calls(id) };
  }

  @Get(':id')
  async get(@Req() req: FastifyRequest, @Param('id') id: string): Promise<SessionState> {
    assertAdmin(req.headers.authorization, this.config.GATEWAY_ADMIN_TOKEN);
    const session = await this.sessions.find(id);
    if (!session) throw GatewayError.sessionNotFound();
    return sessionState(session);
  }
}
