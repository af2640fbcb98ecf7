import { generateRequestSchema, WEIGHT_SWAP_CHOICES, type GenerateRequest } from '@anvil/contracts';
import type { ZodError } from 'zod';

/**
 * Validation of the GenerateRequest body. zod's safeParse costs a few percent of the proxy's
 * CPU per call (every check of every array element goes through its generic machinery), so a
 * request is first checked by hand against the same rules; only one that fails the hand check
 * goes through zod, which then produces the error (and is the reference: a request the hand
 * check refuses but zod accepts is still served, from zod's result). generate-request.spec.ts
 * holds both to the same table of valid and invalid bodies.
 *
 * The rules, as in libs/contracts/src/api/generate.ts (zod 4: numbers are finite, `.int()` is
 * a safe integer, unknown keys are dropped, a default applies when the value is undefined):
 */
export function parseGenerateRequest(body: unknown): { success: true; data: GenerateRequest } | { success: false; error: ZodError } {
  const fast = checkGenerateRequest(body);
  if (fast) return { success: true, data: fast };
  return generateRequestSchema.safeParse(body);
}

/** The parsed request when `body` is valid; undefined when it is not (zod then says why). */
export function checkGenerateRequest(body: unknown): GenerateRequest | undefined {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return undefined;
  const b = body as Record<string, unknown>;
  const { requestId, sessionId, promptIds, maxTokens } = b;
  const { temperature = 1, topP = 1, topK = 0, seed = null, stopIds, stream = false, topLogprobs = 0, weightSwap } = b;
  // A constraint (a recursive grammar) is rare and validated by zod alone.
  if (b.constraint !== undefined) return undefined;
  if (!isId(requestId) || !isId(sessionId)) return undefined;
  if (!isTokenIds(promptIds) || promptIds.length === 0) return undefined;
  if (!isSafeInt(maxTokens) || maxTokens <= 0) return undefined;
  if (!isFiniteNumber(temperature) || temperature < 0) return undefined;
  if (!isFiniteNumber(topP) || !(topP > 0 && topP <= 1)) return undefined;
  if (!isSafeInt(topK) || topK < 0) return undefined;
  if (seed !== null && !isSafeInt(seed)) return undefined;
  if (stopIds !== undefined && !isTokenIds(stopIds)) return undefined;
  if (typeof stream !== 'boolean') return undefined;
  if (!isSafeInt(topLogprobs) || topLogprobs < 0 || topLogprobs > 20) return undefined;
  if (weightSwap !== undefined && !(WEIGHT_SWAP_CHOICES as readonly unknown[]).includes(weightSwap)) return undefined;
  // The arrays are the body's own (zod would copy them): the body is parsed per request and
  // nothing else holds it. Keys in the schema's order, unknown ones dropped, like zod's output.
  const parsed: GenerateRequest = {
    requestId,
    sessionId,
    promptIds,
    maxTokens,
    temperature,
    topP,
    topK,
    seed,
    stopIds: stopIds ?? [],
    stream,
    topLogprobs,
  };
  if (weightSwap !== undefined) parsed.weightSwap = weightSwap as GenerateRequest['weightSwap'];
  return parsed;
}

/** z.string().min(1).max(128) */
function isId(v: unknown): v is string {
  return typeof v === 'string' && v.length >= 1 && v.length <= 128;
}

/** z.number() (finite) */
function isFiniteNumber(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

/** z.number().int() (zod 4: a safe integer) */
function isSafeInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v);
}

/** z.array(z.number().int().nonnegative()) */
function isTokenIds(v: unknown): v is number[] {
  if (!Array.isArray(v)) return false;
  for (let i = 0; i < v.length; i++) {
    const x: unknown = v[i];
    if (!isSafeInt(x) || x < 0) return false;
  }
  return true;
}
