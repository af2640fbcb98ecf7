import { z } from 'zod';

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
});
export type CreateSessionRequest = z.infer<typeof createSessionRequestSchema>;

export const createSessionResponseSchema = z.object({
  sessionId: z.string(),
  /** Secret shown once: accepted as `Authorization: Bearer <key>`. */
  apiKey: z.string(),
  /** Per-session base URL for agents that cannot set headers: /sessions/<id>/v1. */
  baseUrl: z.string(),
});
export type CreateSessionResponse = z.infer<typeof createSessionResponseSchema>;

export const SESSION_STATES = ['open', 'closed'] as const;
