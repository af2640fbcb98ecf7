import { generateRequestSchema } from '@anvil/contracts';
import { describe, expect, it } from 'vitest';
import { checkGenerateRequest, parseGenerateRequest } from './generate-request';

const base = { requestId: 'r1', sessionId: 's1', promptIds: [1, 2, 3], maxTokens: 8 };
const full = { ...base, temperature: 0.7, topP: 0.9, topK: 40, seed: 7, stopIds: [2], stream: true, topLogprobs: 5 };
const withField = (key: string, value: unknown) => ({ ...base, [key]: value });
const without = (key: keyof typeof full) => {
  const copy: Record<string, unknown> = { ...full };
  delete copy[key];
  return copy;
};

/** Bodies the schema accepts (defaults filled in, unknown keys dropped). */
const valid: [string, unknown][] = [
  ['minimal', base],
  ['every field', full],
  ['unknown keys', { ...full, extra: 1, model: 'x' }],
  [
    'undefined optional fields',
    {
      ...base,
      temperature: undefined,
      topP: undefined,
      topK: undefined,
      seed: undefined,
      stopIds: undefined,
      stream: undefined,
      topLogprobs: undefined,
    },
  ],
  ['seed null', withField('seed', null)],
  ['negative seed', withField('seed', -5)],
  ['max safe seed', withField('seed', Number.MAX_SAFE_INTEGER)],
  ['temperature 0', withField('temperature', 0)],
  ['temperature large', withField('temperature', 1e6)],
  ['topP 1', withField('topP', 1)],
  ['topP tiny', withField('topP', 1e-9)],
  ['topK 0', withField('topK', 0)],
  ['topLogprobs 20', withField('topLogprobs', 20)],
  ['topLogprobs 0', withField('topLogprobs', 0)],
  ['empty stopIds', withField('stopIds', [])],
  ['token id 0', withField('promptIds', [0])],
  ['-0 token id', withField('promptIds', [-0])],
  ['ids of 128 chars', { ...base, requestId: 'x'.repeat(128), sessionId: 'y'.repeat(128) }],
  ['integral float', withField('maxTokens', 8.0)],
  ['stream false', withField('stream', false)],
  ['each default missing', without('temperature')],
  ['no stopIds', without('stopIds')],
  ['no seed', without('seed')],
  ['weightSwap finish', withField('weightSwap', 'finish')],
  ['weightSwap abort-and-resume', withField('weightSwap', 'abort-and-resume')],
];

/** Bodies the schema refuses. */
const invalid: [string, unknown][] = [
  ['unknown weightSwap', withField('weightSwap', 'drain')],
  ['weightSwap null', withField('weightSwap', null)],
  ['undefined', undefined],
  ['null', null],
  ['array', [base]],
  ['string', 'hello'],
  ['number', 5],
  ['empty object', {}],
  ['no requestId', { ...base, requestId: undefined }],
  ['empty requestId', withField('requestId', '')],
  ['requestId of 129 chars', withField('requestId', 'x'.repeat(129))],
  ['numeric requestId', withField('requestId', 1)],
  ['no sessionId', { requestId: 'r', promptIds: [1], maxTokens: 1 }],
  ['empty sessionId', withField('sessionId', '')],
  ['sessionId of 129 chars', withField('sessionId', 'y'.repeat(129))],
  ['no promptIds', { requestId: 'r', sessionId: 's', maxTokens: 1 }],
  ['empty promptIds', withField('promptIds', [])],
  ['promptIds not an array', withField('promptIds', '1,2')],
  ['promptIds object', withField('promptIds', { 0: 1, length: 1 })],
  ['negative token id', withField('promptIds', [1, -1])],
  ['fractional token id', withField('promptIds', [1.5])],
  ['string token id', withField('promptIds', ['1'])],
  ['null token id', withField('promptIds', [null])],
  ['NaN token id', withField('promptIds', [Number.NaN])],
  ['Infinity token id', withField('promptIds', [Number.POSITIVE_INFINITY])],
  ['unsafe token id', withField('promptIds', [2 ** 53])],
  ['sparse promptIds', withField('promptIds', [1, , 2])], // eslint-disable-line no-sparse-arrays
  ['no maxTokens', { requestId: 'r', sessionId: 's', promptIds: [1] }],
  ['maxTokens 0', withField('maxTokens', 0)],
  ['maxTokens negative', withField('maxTokens', -1)],
  ['maxTokens fractional', withField('maxTokens', 1.5)],
  ['maxTokens string', withField('maxTokens', '8')],
  ['maxTokens Infinity', withField('maxTokens', Number.POSITIVE_INFINITY)],
  ['maxTokens unsafe', withField('maxTokens', 2 ** 60)],
  ['temperature negative', withField('temperature', -0.1)],
  ['temperature NaN', withField('temperature', Number.NaN)],
  ['temperature Infinity', withField('temperature', Number.POSITIVE_INFINITY)],
  ['temperature null', withField('temperature', null)],
  ['temperature string', withField('temperature', '1')],
  ['topP 0', withField('topP', 0)],
  ['topP above 1', withField('topP', 1.0001)],
  ['topP negative', withField('topP', -0.5)],
  ['topP NaN', withField('topP', Number.NaN)],
  ['topP null', withField('topP', null)],
  ['topK negative', withField('topK', -1)],
  ['topK fractional', withField('topK', 0.5)],
  ['topK null', withField('topK', null)],
  ['seed fractional', withField('seed', 1.5)],
  ['seed string', withField('seed', '1')],
  ['seed unsafe', withField('seed', 2 ** 53)],
  ['seed Infinity', withField('seed', Number.NEGATIVE_INFINITY)],
  ['stopIds null', withField('stopIds', null)],
  ['stopIds negative', withField('stopIds', [-1])],
  ['stopIds fractional', withField('stopIds', [0.5])],
  ['stopIds not an array', withField('stopIds', 2)],
  ['stream string', withField('stream', 'true')],
  ['stream null', withField('stream', null)],
  ['stream number', withField('stream', 1)],
  ['topLogprobs 21', withField('topLogprobs', 21)],
  ['topLogprobs negative', withField('topLogprobs', -1)],
  ['topLogprobs fractional', withField('topLogprobs', 1.5)],
  ['topLogprobs null', withField('topLogprobs', null)],
];

describe('checkGenerateRequest (the hand-written fast path)', () => {
  it.each(valid)('accepts what the schema accepts, with the same output: %s', (_name, body) => {
    const reference = generateRequestSchema.safeParse(body);
    expect(reference.success).toBe(true);
    expect(checkGenerateRequest(body)).toStrictEqual(reference.data);
    // Same keys in the same order (JSON on the wire and in logs reads the same).
    expect(Object.keys(checkGenerateRequest(body) ?? {})).toEqual(Object.keys(reference.data ?? {}));
  });

  it.each(invalid)('refuses what the schema refuses: %s', (_name, body) => {
    expect(generateRequestSchema.safeParse(body).success).toBe(false);
    expect(checkGenerateRequest(body)).toBeUndefined();
  });

  it('gives every request its own default stopIds array', () => {
    const a = checkGenerateRequest(base);
    const b = checkGenerateRequest(base);
    expect(a?.stopIds).toEqual([]);
    expect(a?.stopIds).not.toBe(b?.stopIds);
  });
});

describe('parseGenerateRequest', () => {
  it('returns zod errors (the field named) for a body the fast path refuses', () => {
    const parsed = parseGenerateRequest(withField('topP', 2));
    expect(parsed.success).toBe(false);
    if (parsed.success) return;
    expect(parsed.error.issues[0]?.path).toEqual(['topP']);
    expect(parsed.error).toStrictEqual(generateRequestSchema.safeParse(withField('topP', 2)).error);
  });

  it('parses a valid body to what the schema gives', () => {
    expect(parseGenerateRequest(full)).toStrictEqual({ success: true, data: generateRequestSchema.parse(full) });
  });
});
