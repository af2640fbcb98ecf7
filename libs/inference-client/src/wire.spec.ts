import { generateResponseSchema, generateStreamLineSchema } from '@anvil/contracts';
import { describe, expect, it } from 'vitest';
import { parseGenerateResponse, parseStreamLine, ProxyWireError } from './wire';

const response = {
  requestId: 'r1',
  outputIds: [5, 6],
  logprobs: [-0.5, -1],
  versions: [3, 3],
  finishReason: 'stop',
  promptTokens: 4,
  cachedPromptTokens: 2,
  replica: 'a',
  firstTokenMs: 1.5,
};

describe('inference-proxy wire checks', () => {
  it('accept what the contract schemas accept, with the same result', () => {
    expect(parseGenerateResponse(structuredClone(response))).toEqual(generateResponseSchema.parse(response));
    const tokens = { type: 'tokens', ids: [1], logprobs: [-0.1], versions: [0] };
    expect(parseStreamLine(structuredClone(tokens))).toEqual(generateStreamLineSchema.parse(tokens));
    const done = { type: 'done', response };
    expect(parseStreamLine(structuredClone(done))).toEqual(generateStreamLineSchema.parse(done));
    const error = { type: 'error', error: { message: 'boom', type: 'server_error', param: null, code: 'x' } };
    expect(parseStreamLine(structuredClone(error))).toEqual(generateStreamLineSchema.parse(error));
  });

  it('reads a null logprob (JSON has no -Infinity) as -Infinity', () => {
    expect(parseGenerateResponse({ ...response, logprobs: [null, -1] }).logprobs).toEqual([Number.NEGATIVE_INFINITY, -1]);
  });

  it.each([
    ['a negative id', { ...response, outputIds: [-1, 6] }],
    ['a fractional version', { ...response, versions: [1.5, 3] }],
    ['arrays of different lengths', { ...response, versions: [3] }],
    ['an unknown finish reason', { ...response, finishReason: 'eos' }],
    ['a missing replica', { ...response, replica: undefined }],
    ['a string logprob', { ...response, logprobs: ['-1', -1] }],
  ])('refuses %s', (_what, bad) => {
    expect(() => parseGenerateResponse(bad)).toThrow(ProxyWireError);
  });

  it('refuses unknown stream lines', () => {
    expect(() => parseStreamLine({ type: 'progress' })).toThrow(ProxyWireError);
    expect(() => parseStreamLine([1])).toThrow(ProxyWireError);
  });
});
