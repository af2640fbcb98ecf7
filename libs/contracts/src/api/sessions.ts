import { z } from 'zod';
import { WEIGHT_SWAP_CHOICES } from './generate';

/** Bounds of the call limits a session may be given (the largest budget fits PostgreSQL's integer). */
export const MAX_CALLS = 1_000_000_000;
export const MAX_CALLS_PER_SECOND = 1_000_000;

/**
 * Gateway admin API, called by the rollout manager with its own credential. A session is
 * one rollout's door: its key opens that session and nothing else.
 */
export const createSessionRequestSchema = z.object({
  rolloutId: z.string().min(1).max(128),
  groupId: z.string().min(1).max(128),
  taskId: z.string().min(1).max(128),
  model: z.string().min(1),
  maxContextTokens: z.number().int().positive().optional(),
  /** Wall-clock deadline after which the session is closed (ms since epoch). */
  expiresAt: z.number().int().positive().optional(),
  /** What a weight update does to this session's running generations (absent: the inference-proxy's WEIGHT_SWAP_POLICY); see WEIGHT_SWAP_CHOICES. */
  weightSwap: z.enum(WEIGHT_SWAP_CHOICES).optional(),
  /**
   * The session's call budget: LLM calls answered at most (each choice of an n > 1 request
   * counts); the excess is refused with 429 (absent: no budget).
   */
  maxCalls: z.number().int().positive().max(MAX_CALLS).optional(),
  /** The session's rate limit: a token bucket refilled at this many calls per second (absent: no rate limit). */
  callsPerSecond: z.number().positive().max(MAX_CALLS_PER_SECOND).optional(),
  /** The bucket's size: calls answered back to back before the rate applies (absent: one second's worth, at least 1; needs callsPerSecond). */
  callBurst: z.number().int().positive().max(MAX_CALLS).optional(),
});
export type CreateSessionRequest = z.infer<typeof createSessionRequestSchema>;

export const createSessionResponseSchema = z.object({
  sessionId: z.string(),
  /** Secret shown once: accepted as `Authorization: Bearer <key>`. */
  apiKey: z.string(),
  /** Per-session base URL for agents that cannot set headers: <gateway>/sessions/<the whole apiKey>/v1 (the path segment is the secret). */
  baseUrl: z.string(),
});
export type CreateSessionResponse = z.infer<typeof createSessionResponseSchema>;

/**
 * POST /admin/v1/sessions/batch: many sessions in one request (answered in the same order, all
 * or none), so a manager opening hundreds at once costs the gateway one statement, not hundreds
 * of requests queued behind its agents' calls.
 */
export const createSessionsRequestSchema = z.object({ sessions: z.array(createSessionRequestSchema).min(1).max(1000) });
export type CreateSessionsRequest = z.infer<typeof createSessionsRequestSchema>;
export const createSessionsResponseSchema = z.object({ sessions: z.array(createSessionResponseSchema) });
export type CreateSessionsResponse = z.infer<typeof createSessionsResponseSchema>;

export const SESSION_STATES = ['open', 'closed'] as const;

/** Calls a session's limits refused (answered 429, recorded nowhere): over its budget, over its rate. */
export const callsRefusedSchema = z.object({ budget: z.number().int().nonnegative(), rate: z.number().int().nonnegative() });
export type CallsRefused = z.infer<typeof callsRefusedSchema>;

/**
 * GET /admin/v1/sessions/:id and POST /admin/v1/sessions/:id/close answer this. Times are ms
 * since epoch. `policyVersionAtStart` is null until the session's first call is admitted.
 */
export const sessionStateSchema = z.object({
  sessionId: z.string(),
  status: z.enum(SESSION_STATES),
  rolloutId: z.string(),
  groupId: z.string(),
  taskId: z.string(),
  model: z.string(),
  /** Calls recorded (each choice of an n > 1 request counts). */
  callCount: z.number().int().nonnegative(),
  /** Branches started (the first call starts one; every history rewrite starts another). */
  branchCount: z.number().int().nonnegative(),
  policyVersionAtStart: z.number().int().nonnegative().nullable(),
  createdAt: z.number().int().nonnegative(),
  expiresAt: z.number().int().nonnegative().nullable(),
  closedAt: z.number().int().nonnegative().nullable(),
  /** Why it closed: 'closed' (admin API), 'expired'. */
  closeReason: z.string().nullable(),
  /** The call limits it was opened with (null: none); optional: absent from gateways before call limits. */
  maxCalls: z.number().int().positive().nullable().optional(),
  callsPerSecond: z.number().positive().nullable().optional(),
  callBurst: z.number().int().positive().nullable().optional(),
  /** Calls admitted against the budget (answered or being answered; a call that fails unanswered gives its place back). */
  callsAdmitted: z.number().int().nonnegative().optional(),
  callsRefused: callsRefusedSchema.optional(),
});
export type SessionState = z.infer<typeof sessionStateSchema>;

/**
 * GET /admin/v1/sessions/:id/calls answers this: the calls the session recorded, in turn order
 * (each choice of an n > 1 request is a call), with the reply each one returned. A black-box
 * agent's verifier scores these (process rewards, one per call) rather than the transcript the
 * agent claims.
 */
export const sessionCallsSchema = z.object({
  sessionId: z.string(),
  calls: z.array(
    z.object({
      callId: z.string(),
      turnIndex: z.number().int().nonnegative(),
      branchId: z.string(),
      /** The assistant message as the agent received it (role, content, tool_calls, ...). */
      message: z.looseObject({ role: z.literal('assistant'), content: z.string().nullable() }),
    }),
  ),
});
export type SessionCalls = z.infer<typeof sessionCallsSchema>;

/**
 * POST /admin/v1/sessions/batch/close: closes many (idempotent) and answers the state of each one
 * the gateway knows (unknown ids are left out); with `withCalls`, each also with its recorded
 * calls (as GET .../calls answers them), read after the close so nothing is added after: the
 * rollout manager scores a black-box agent's calls as it ends its session, in one round trip.
 */
export const closeSessionsRequestSchema = z.object({
  sessionIds: z.array(z.string().min(1).max(128)).min(1).max(1000),
  withCalls: z.boolean().optional(),
});
export type CloseSessionsRequest = z.infer<typeof closeSessionsRequestSchema>;
export const closeSessionsResponseSchema = z.object({
  sessions: z.array(sessionStateSchema.extend({ calls: sessionCallsSchema.shape.calls.optional() })),
});
export type CloseSessionsResponse = z.infer<typeof closeSessionsResponseSchema>;

/**
 * POST /admin/v1/sessions/batch/budget-spent: which of `sessionIds` have had a call refused for
 * their call budget (the agent asked for more than it may have). The rollout manager asks this
 * of its running black-box agents' sessions, one request for all of them, and ends those rollouts.
 */
export const budgetSpentRequestSchema = z.object({ sessionIds: z.array(z.string().min(1).max(128)).min(1).max(1000) });
export type BudgetSpentRequest = z.infer<typeof budgetSpentRequestSchema>;
export const budgetSpentResponseSchema = z.object({
  sessions: z.array(z.object({ sessionId: z.string(), callsRefused: callsRefusedSchema })),
});
export type BudgetSpentResponse = z.infer<typeof budgetSpentResponseSchema>;
