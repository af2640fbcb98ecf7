import { z } from 'zod';

/**
 * What a weight update does to a running generation (a session's or a request's choice):
 *  - 'finish': it completes on the weights it started with (the swap waits for it, up to the
 *    proxy's drain timeout), so each call's tokens carry one version;
 *  - 'abort-and-resume': it is interrupted at a token boundary and resumed under the new weights
 *    (prompt + its tokens so far), so a call's tokens carry the versions that produced them.
 * A rollout continues across the update either way: its later calls run on the new weights.
 */
export const WEIGHT_SWAP_CHOICES = ['finish', 'abort-and-resume'] as const;
export type WeightSwapChoice = (typeof WEIGHT_SWAP_CHOICES)[number];

/**
 * What a constrained generation must write (libs/guided-decoding's GrammarNode): literal text
 * (added tokens in it are matched as their own ids), a JSON value valid against a JSON Schema,
 * a sequence, or one of several alternatives.
 */
export type GenerateGrammarNode =
  { text: string } | { json: boolean | Record<string, unknown> } | { seq: GenerateGrammarNode[] } | { oneOf: GenerateGrammarNode[] };
export const generateGrammarNodeSchema: z.ZodType<GenerateGrammarNode> = z
  .lazy(() =>
    z.union([
      z.strictObject({ text: z.string() }),
      z.strictObject({ json: z.union([z.boolean(), z.record(z.string(), z.unknown())]) }),
      z.strictObject({ seq: z.array(generateGrammarNodeSchema) }),
      z.strictObject({ oneOf: z.array(generateGrammarNodeSchema).min(1) }),
    ]),
  )
  .meta({ id: 'GenerateGrammarNode' });

/**
 * Constrained decoding (a forced tool call): every sampled token keeps the output a prefix of
 * `grammar`, and one of the request's stopIds ends it once it is complete. The embedded engine
 * masks its vocabulary per token; vLLM and SGLang get the same language as an EBNF grammar. A
 * grammar a backend cannot enforce is refused with 400.
 */
export const generateConstraintSchema = z.object({ grammar: generateGrammarNodeSchema });
export type GenerateConstraint = z.infer<typeof generateConstraintSchema>;

/**
 * Per output token, how it was sampled: 0 freely, 1 within an allowed-token mask of several ids
 * (or a backend's grammar that does not say how many), 2 forced (the mask allowed this id only).
 */
export const TOKEN_CONSTRAINT = { free: 0, constrained: 1, forced: 2 } as const;
const tokenConstraintMarks = () => z.array(z.number().int().min(0).max(2));

/**
 * The inference-proxy's token-level internal API: ids in, ids + logprobs + versions out.
 * POST /internal/v1/generate takes the request below as JSON; the answer is one JSON
 * response, or, with `stream: true`, NDJSON lines (`generateStreamLineSchema`): token
 * chunks as they are sampled, then one `done` line carrying the whole response (or one
 * `error` line). Errors outside a stream use the OpenAI error body (`apiErrorBodySchema`).
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
  /** Stream token chunks as NDJSON lines instead of one JSON response. */
  stream: z.boolean().default(false),
  /** Alternatives per sampled token: the k most likely ids with their logprobs (0 = none; backends that cannot refuse k > 0 with 400). */
  topLogprobs: z.number().int().min(0).max(20).default(0),
  /** What a weight update does to this generation while it runs (absent: the proxy's WEIGHT_SWAP_POLICY); see WEIGHT_SWAP_CHOICES. */
  weightSwap: z.enum(WEIGHT_SWAP_CHOICES).optional(),
  /** Constrained decoding (absent: none); needs stopIds to end the grammar on. */
  constraint: generateConstraintSchema.optional(),
});
export type GenerateRequest = z.infer<typeof generateRequestSchema>;
/** What a caller may send: fields with defaults are optional. */
export type GenerateRequestInput = z.input<typeof generateRequestSchema>;

/** The k most likely tokens at one output position (same distribution as `logprobs`), most likely first. */
export const topLogprobsSchema = z.object({
  ids: z.array(z.number().int().nonnegative()),
  logprobs: z.array(z.number()),
});
export type TopLogprobs = z.infer<typeof topLogprobsSchema>;

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
  /** Milliseconds from the proxy taking the request to its first token (null: no token); lets a non-streaming caller still report time to first token. */
  firstTokenMs: z.number().nonnegative().nullable().optional(),
  /** One entry per output token, when the request asked for topLogprobs > 0. */
  topLogprobs: z.array(topLogprobsSchema).optional(),
  /** With a constraint: one TOKEN_CONSTRAINT mark per output token (absent: none was constrained). */
  constrained: tokenConstraintMarks().optional(),
});
export type GenerateResponse = z.infer<typeof generateResponseSchema>;

/** Tokens sampled since the previous chunk, each with its logprob and policy version. */
export const generateTokenChunkSchema = z.object({
  type: z.literal('tokens'),
  ids: z.array(z.number().int().nonnegative()),
  logprobs: z.array(z.number()),
  versions: z.array(z.number().int().nonnegative()),
  topLogprobs: z.array(topLogprobsSchema).optional(),
  /** With a constraint: one TOKEN_CONSTRAINT mark per id. */
  constrained: tokenConstraintMarks().optional(),
});
export type GenerateTokenChunk = z.infer<typeof generateTokenChunkSchema>;

/** OpenAI-style error body, used by the internal APIs too so one client parses both. */
export const apiErrorBodySchema = z.object({
  error: z.object({
    message: z.string(),
    type: z.string(),
    param: z.string().nullable(),
    code: z.string().nullable(),
  }),
});
export type ApiErrorBody = z.infer<typeof apiErrorBodySchema>;

/** One NDJSON line of a streamed generation. */
export const generateStreamLineSchema = z.discriminatedUnion('type', [
  generateTokenChunkSchema,
  z.object({ type: z.literal('done'), response: generateResponseSchema }),
  z.object({ type: z.literal('error'), error: apiErrorBodySchema.shape.error }),
]);
export type GenerateStreamLine = z.infer<typeof generateStreamLineSchema>;
