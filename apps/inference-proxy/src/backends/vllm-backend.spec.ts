import { describe, expect, it } from 'vitest';
import type { StreamState, StreamStep } from './external-backend';
import { VllmBackend } from './vllm-backend';

class Exposed extends VllmBackend {
  parse(data: unknown, state: StreamState): StreamStep {
    return this.parseEvent(data, state);
  }
}

const backend = new Exposed({ url: 'http://engine:8000' });
const event = (tokens: unknown[], tops?: Record<string, number | null>[]) => ({
  choices: [
    {
      index: 0,
      logprobs: { tokens, token_logprobs: tokens.map(() => -0.5), top_logprobs: tops ?? tokens.map(() => ({})) },
      finish_reason: null,
    },
  ],
});

describe('VllmBackend.parseEvent', () => {
  it('reads "token_id:<n>" tokens exactly as /^token_id:(\\d+)$/ does', () => {
    const good = ['token_id:0', 'token_id:7', 'token_id:0042', 'token_id:151643'];
    expect(backend.parse(event(good), { received: 0, wantTop: false }).ids).toEqual([0, 7, 42, 151643]);
    for (const bad of [
      'token_id:',
      'token_id:-1',
      'token_id:1.5',
      'token_id: 1',
      'token_id:1\n',
      'tok1',
      'TOKEN_ID:1',
      'token_id:１',
      'xtoken_id:1',
      null,
      5,
    ]) {
      expect(() => backend.parse(event([bad]), { received: 0, wantTop: false }), String(bad)).toThrow(/is not "token_id:<n>"/);
    }
  });

  it('parses alternatives only when they were asked for (vLLM lists the sampled token even at k = 0)', () => {
    const tops = [{ 'token_id:3': -2, 'token_id:4': -0.1, 'token_id:5': null }];
    expect(backend.parse(event(['token_id:4'], tops), { received: 0, wantTop: false }).topLogprobs).toBeUndefined();
    expect(backend.parse(event(['token_id:4'], tops), { received: 0, wantTop: true }).topLogprobs).toEqual([
      { ids: [4, 3, 5], logprobs: [-0.1, -2, Number.NEGATIVE_INFINITY] },
    ]);
  });
});
