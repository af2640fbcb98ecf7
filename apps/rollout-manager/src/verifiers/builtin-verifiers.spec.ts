import { describe, expect, it } from 'vitest';
import { BUILTIN_VERIFIERS, VerifierError } from './verifiers';

const verify = (answer: unknown, finalAnswer: string | null) =>
  BUILTIN_VERIFIERS.number({
    task: { id: 't', messages: [], tools: [], data: { answer }, split: 'train', difficulty: 0 } as never,
    transcript: { messages: [], finalAnswer },
  });

describe('the number verifier', () => {
  it('scores the first number of the answer, in a sentence or alone', async () => {
    expect(await verify(98, 'The larger number is 98.')).toMatchObject({ outcomeReward: 1, success: true });
    expect(await verify(98, '98')).toMatchObject({ outcomeReward: 1, success: true });
    expect(await verify('-3', 'It is -3, since 4 - 7 = -3')).toMatchObject({ outcomeReward: 1 });
    // the first number counts, not any number: restating the question does not score
    expect(await verify(98, '58 or 98? The answer is 98')).toMatchObject({ outcomeReward: 0, success: false });
    expect(await verify(98, 'ninety-eight')).toMatchObject({ outcomeReward: 0 });
    expect(await verify(98, null)).toMatchObject({ outcomeReward: 0 });
  });

  it('needs a numeric data.answer', () => {
    expect(() => verify(undefined, '1')).toThrow(VerifierError);
    expect(() => verify('many', '1')).toThrow(/numeric data.answer/);
  });
});
