import { z } from 'zod';

/**
 * The inference-proxy's token-level internal API: ids in, ids + logprobs + versions out.
 * Over HTTP these travel as a binary frame (content-type application/x-anvil-frame) so the
 * arrays stay compact; the JSON shape below is what the frame body holds.
 */
export const generateRequestSchema = z.object({
  requestId: z.string().min(1).max(128),
  /** Routing key: calls of one session stick to one replica for KV-cache reuse. */
  sessionId: z.string().min(1).max(128),
  promptIds: z.array(z.number().int().nonnegative()).min(1),
  maxTokens: z.number().int().positive(),
  temperature: z.number().nonnegative().default(1),
  topP: z.number().gt(0).lte(1).default(1),
  topK: z.number().int().nonnegative().default(0),
  seed: z.number().int().nullable().default(null),
  stopIds: z.array(z.number().int().nonnegative()).default([]),
});
export type GenerateRequest = z.infer<typeof generateRequestSchema>;

export const generateResponseSchema = z.object({
  requestId: z.string(),
  outputIds: z.array(z.number().int().nonnegative()),
  /** Log-prob of each sampled token under the distribution it was sampled from. */
  logprobs: z.array(z.number()),
  /** Policy version that produced each token (changes mid-call under abort-and-resume). */
  versions: z.array(z.number().int().nonnegative()),
  finishReason: z.enum(['stop', 'length', 'abort']),
  promptTokens: z.number().int().nonnegative(),
  cachedPromptTokens: z.number().int().nonnegative(),
  replica: z.string(),
});
export type GenerateResponse = z.infer<typeof generateResponseSchema>;
