import type { ApiErrorBody, GenerateResponse, GenerateStreamLine, GenerateTokenChunk, TopLogprobs } from '@anvil/contracts';

/**
 * Shape checks of the inference-proxy's answers (the contracts' generateResponseSchema and
 * generateStreamLineSchema), written out by hand: they run once per token chunk of every call,
 * where a schema library's per-element work showed up in profiles. They accept exactly what
 * the schemas accept, plus: the per-token arrays of one answer must have equal lengths.
 */
export class ProxyWireError extends Error {
  override readonly name = 'ProxyWireError';
}

const fail = (what: string): never => {
  throw new ProxyWireError(`inference-proxy answer malformed: ${what}`);
};

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function ids(v: unknown, what: string): number[] {
  if (!Array.isArray(v)) return fail(`${what} is not an array`);
  for (const x of v) if (typeof x !== 'number' || !Number.isInteger(x) || x < 0) fail(`${what} holds ${JSON.stringify(x)}`);
  return v as number[];
}

function numbers(v: unknown, what: string): number[] {
  if (!Array.isArray(v)) return fail(`${what} is not an array`);
  // JSON has no -Infinity: a token of probability 0 under a processed distribution comes as null.
  for (let i = 0; i < v.length; i++) {
    const x: unknown = v[i];
    if (x === null) v[i] = Number.NEGATIVE_INFINITY;
    else if (typeof x !== 'number') fail(`${what} holds ${JSON.stringify(x)}`);
  }
  return v as number[];
}

function count(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) return fail(`${what} is ${JSON.stringify(v)}`);
  return v;
}

function tokens(
  o: Record<string, unknown>,
  idsKey: string,
): { ids: number[]; logprobs: number[]; versions: number[]; topLogprobs?: TopLogprobs[]; constrained?: number[] } {
  const base = { ids: ids(o[idsKey], idsKey), logprobs: numbers(o.logprobs, 'logprobs'), versions: ids(o.versions, 'versions') };
  if (base.logprobs.length !== base.ids.length || base.versions.length !== base.ids.length)
    fail(`${idsKey}, logprobs and versions differ in length`);
  // constrained decoding's per-token marks (0 free, 1 within a mask, 2 forced)
  const out: { ids: number[]; logprobs: number[]; versions: number[]; constrained?: number[] } = base;
  if (o.constrained !== undefined) {
    const marks = ids(o.constrained, 'constrained');
    if (marks.length !== base.ids.length || marks.some((m) => m > 2)) fail('constrained is not one mark (0..2) per token');
    out.constrained = marks;
  }
  if (o.topLogprobs === undefined) return out;
  if (!Array.isArray(o.topLogprobs) || o.topLogprobs.length !== out.ids.length) return fail('topLogprobs is not one entry per token');
  const top = o.topLogprobs.map((t: unknown) => {
    if (!isObject(t)) return fail('topLogprobs entry');
    const e = { ids: ids(t.ids, 'topLogprobs ids'), logprobs: numbers(t.logprobs, 'topLogprobs logprobs') };
    if (e.ids.length !== e.logprobs.length) fail('topLogprobs ids and logprobs differ in length');
    return e;
  });
  return { ...out, topLogprobs: top };
}

export function parseGenerateResponse(v: unknown): GenerateResponse {
  if (!isObject(v)) return fail('response is not an object');
  if (typeof v.requestId !== 'string') fail('requestId');
  if (typeof v.replica !== 'string') fail('replica');
  if (v.finishReason !== 'stop' && v.finishReason !== 'length' && v.finishReason !== 'abort')
    fail(`finishReason ${JSON.stringify(v.finishReason)}`);
  const t = tokens(v, 'outputIds');
  return {
    ...(t.topLogprobs ? { topLogprobs: t.topLogprobs } : {}),
    ...(t.constrained ? { constrained: t.constrained } : {}),
    requestId: v.requestId as string,
    outputIds: t.ids,
    logprobs: t.logprobs,
    versions: t.versions,
    finishReason: v.finishReason as GenerateResponse['finishReason'],
    promptTokens: count(v.promptTokens, 'promptTokens'),
    cachedPromptTokens: count(v.cachedPromptTokens, 'cachedPromptTokens'),
    replica: v.replica as string,
    ...(typeof v.firstTokenMs === 'number' && v.firstTokenMs >= 0 ? { firstTokenMs: v.firstTokenMs } : {}),
  };
}

function parseError(v: unknown): ApiErrorBody['error'] {
  if (!isObject(v) || typeof v.message !== 'string' || typeof v.type !== 'string') return fail('error line');
  const nullableString = (x: unknown) => (x === null || x === undefined ? null : typeof x === 'string' ? x : fail('error line'));
  return { message: v.message, type: v.type, param: nullableString(v.param), code: nullableString(v.code) };
}

export function parseStreamLine(v: unknown): GenerateStreamLine {
  if (!isObject(v)) return fail('stream line is not an object');
  if (v.type === 'tokens') {
    const chunk: GenerateTokenChunk = { type: 'tokens', ...tokens(v, 'ids') };
    return chunk;
  }
  if (v.type === 'done') return { type: 'done', response: parseGenerateResponse(v.response) };
  if (v.type === 'error') return { type: 'error', error: parseError(v.error) };
  return fail(`stream line type ${JSON.stringify(v.type)}`);
}
