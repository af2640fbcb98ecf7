import { describe, expect, it } from 'vitest';
import { AdvantageInputError, computeBatchAdvantages, computeGroupAdvantages, RolloutScore, RunningBaseline } from './index';

const group = (rewards: number[], masked: number[] = []): RolloutScore[] =>
  rewards.map((r, i) => ({ rolloutId: `r${i}`, outcomeReward: r, ...(masked.includes(i) ? { masked: true } : {}) }));

function close(actual: number[], expected: number[], digits = 9) {
  expect(actual).toHaveLength(expected.length);
  expected.forEach((e, i) => expect(actual[i]).toBeCloseTo(e, digits));
}

describe('estimators (hand-computed)', () => {
  it('grpo: (R − mean)/std, population std', () => {
    close(computeGroupAdvantages('t', group([1, 0, 0, 1]), { estimator: 'grpo', stdEpsilon: 0 }).perRollout, [1, -1, -1, 1]);
    const a = computeGroupAdvantages('t', group([3, 1, 2]), { estimator: 'grpo', stdEpsilon: 0 });
    close(a.perRollout, [1 / Math.sqrt(2 / 3), -1 / Math.sqrt(2 / 3), 0]);
    expect(a.mean).toBeCloseTo(2, 12);
    expect(a.std).toBeCloseTo(Math.sqrt(2 / 3), 12);
    expect(a.zeroVariance).toBe(false);
  });

  it('grpo: stdEpsilon is added to the std (default 1e-6) and unbiasedStd uses n − 1', () => {
    close(computeGroupAdvantages('t', group([1, 0]), { estimator: 'grpo' }).perRollout, [0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)]);
    close(computeGroupAdvantages('t', group([1, 0]), { estimator: 'grpo', stdEpsilon: 0, unbiasedStd: true }).perRollout, [
      Math.SQRT1_2,
      -Math.SQRT1_2,
    ]);
  });

  it('dr_grpo: R − mean, no std', () => {
    const a = computeGroupAdvantages('t', group([3, 1, 2]), { estimator: 'dr_grpo' });
    close(a.perRollout, [1, -1, 0]);
    expect(a.std).toBe(0);
  });

  it('rloo: R_i − mean of the others', () => {
    close(computeGroupAdvantages('t', group([3, 1, 2]), { estimator: 'rloo' }).perRollout, [1.5, -1.5, 0]);
    close(computeGroupAdvantages('t', group([4, 0, 1, 3]), { estimator: 'rloo' }).perRollout, [4 - 4 / 3, 0 - 8 / 3, 1 - 7 / 3, 3 - 5 / 3]);
  });

  it('reinforce_pp: group mean removed, divided by the batch std', () => {
    const out = computeBatchAdvantages(
      [
        { taskId: 'a', rollouts: group([1, 0]) },
        { taskId: 'b', rollouts: group([3, 1, 2]) },
      ],
      { estimator: 'reinforce_pp', stdEpsilon: 0 },
    );
    // centred [.5, −.5] and [1, −1, 0]: batch std sqrt(2.5/5)
    const s = Math.sqrt(0.5);
    close(out[0].perRollout, [0.5 / s, -0.5 / s]);
    close(out[1].perRollout, [1 / s, -1 / s, 0]);
    expect(out[0].std).toBeCloseTo(s, 12);
    expect(out[1].std).toBeCloseTo(s, 12);
  });

  it('reinforce_pp one group at a time: the batch peers count in the std, as if the batch were computed at once', () => {
    // the first group of the test above, settled alone after the second: its peers are [1, −1, 0]
    const alone = computeGroupAdvantages('a', group([1, 0]), { estimator: 'reinforce_pp', stdEpsilon: 0 }, { batchPeers: [1, -1, 0] });
    const s = Math.sqrt(0.5);
    close(alone.perRollout, [0.5 / s, -0.5 / s]);
    expect(alone.std).toBeCloseTo(s, 12);
    // without peers the batch is the group: then it is GRPO with the population std
    close(computeGroupAdvantages('a', group([1, 0]), { estimator: 'reinforce_pp', stdEpsilon: 0 }).perRollout, [1, -1]);
    // the other estimators ignore peers
    close(computeGroupAdvantages('a', group([1, 0]), { estimator: 'dr_grpo' }, { batchPeers: [5, -5] }).perRollout, [0.5, -0.5]);
    expect(() => computeGroupAdvantages('a', group([1, 0]), { estimator: 'reinforce_pp' }, { batchPeers: [Number.NaN] })).toThrow(
      /batchPeers\[0\]/,
    );
  });

  it('a group whose rewards are all equal yields zeros and says so', () => {
    for (const estimator of ['grpo', 'dr_grpo', 'rloo', 'reinforce_pp'] as const) {
      const a = computeGroupAdvantages('t', group([0.8, 0.8, 0.8]), { estimator });
      expect(a.perRollout).toEqual([0, 0, 0]);
      expect(a.zeroVariance).toBe(true);
    }
    // spans up to the tolerance count as equal; just above it they do not
    expect(computeGroupAdvantages('t', group([1, 1 + 1e-10]), { estimator: 'dr_grpo' }).zeroVariance).toBe(true);
    expect(computeGroupAdvantages('t', group([1, 1 + 1e-8]), { estimator: 'dr_grpo' }).zeroVariance).toBe(false);
  });
});

describe('masked rollouts', () => {
  it('are left out of the statistics by default and get advantage 0', () => {
    const a = computeGroupAdvantages('t', group([1, 0, 1], [0]), { estimator: 'grpo', stdEpsilon: 0 });
    close(a.perRollout, [0, -1, 1]);
    expect(a.statsCount).toBe(2);
    expect(a.mean).toBeCloseTo(0.5, 12);
  });

  it('are counted when includeMaskedInStats', () => {
    const a = computeGroupAdvantages('t', group([1, 0, 1], [0]), { estimator: 'grpo', stdEpsilon: 0, includeMaskedInStats: true });
    const std = Math.sqrt(2 / 9);
    close(a.perRollout, [1 / 3 / std, -2 / 3 / std, 1 / 3 / std]);
    expect(a.statsCount).toBe(3);
  });

  it('a group with every rollout masked gives zeros, zeroVariance, statsCount 0', () => {
    const a = computeGroupAdvantages('t', group([1, 0], [0, 1]), { estimator: 'grpo' });
    expect(a).toEqual({ perRollout: [0, 0], zeroVariance: true, mean: 0, std: 0, statsCount: 0 });
  });

  it('excluding masked rollouts can make a group zero-variance', () => {
    expect(computeGroupAdvantages('t', group([0, 1, 1], [0]), { estimator: 'dr_grpo' }).zeroVariance).toBe(true);
    expect(computeGroupAdvantages('t', group([0, 1, 1], [0]), { estimator: 'dr_grpo', includeMaskedInStats: true }).zeroVariance).toBe(
      false,
    );
  });
});

describe('running baseline', () => {
  it('replaces the group mean once the task has one, and is updated after each group', () => {
    const baseline = new RunningBaseline({ decay: 0.5 });
    close(computeGroupAdvantages('t', group([1, 0]), { estimator: 'dr_grpo', baseline }).perRollout, [0.5, -0.5]);
    expect(baseline.value('t')).toBeCloseTo(0.5, 12);
    const second = computeGroupAdvantages('t', group([1, 0, 1, 1]), { estimator: 'dr_grpo', baseline });
    close(second.perRollout, [0.5, -0.5, 0.5, 0.5]);
    expect(second.mean).toBeCloseTo(0.5, 12);
    expect(baseline.value('t')).toBeCloseTo(0.5 * 0.5 + 0.5 * 0.75, 12);
    expect(baseline.value('other')).toBeUndefined();
  });

  it('snapshot/restore, and validation', () => {
    const b = new RunningBaseline();
    b.update('t', [1, 0]);
    b.update('t', [1, 1]);
    expect(b.value('t')).toBeCloseTo(0.9 * 0.5 + 0.1 * 1, 12);
    expect(RunningBaseline.restore(b.snapshot()).value('t')).toBeCloseTo(b.value('t')!, 12);
    expect(() => new RunningBaseline({ decay: 1 })).toThrow(AdvantageInputError);
    expect(() => b.update('t', [])).toThrow(/rewards/);
    expect(() => b.update('t', [Number.NaN])).toThrow(/rewards\[0\]/);
    expect(() => computeGroupAdvantages('t', group([1, 0]), { estimator: 'rloo', baseline: b })).toThrow(/cfg\.baseline/);
  });
});

describe('process rewards: perCall = perRollout + λ·(p − μ_k)[/σ], a baseline per call position', () => {
  const withProcess = (): RolloutScore[] => [
    { rolloutId: 'a', outcomeReward: 1, processRewards: [1, 1] },
    { rolloutId: 'b', outcomeReward: 0, processRewards: [1, 0, 0] },
  ];
  // positions: call 0 [1, 1] -> mean 1; call 1 [1, 0] -> mean 0.5; call 2 only b -> no baseline, 0
  // centred: a [0, 0.5], b [0, -0.5, 0]

  it('dr_grpo, λ = 0.5: each call against the same call of the other rollouts', () => {
    const a = computeGroupAdvantages('t', withProcess(), { estimator: 'dr_grpo', processRewardWeight: 0.5 });
    close(a.perRollout, [0.5, -0.5]);
    close(a.perCall![0], [0.5, 0.75]);
    close(a.perCall![1], [-0.5, -0.75, -0.5]);
  });

  it('grpo, λ = 1: centred process rewards divided by their root mean square', () => {
    const a = computeGroupAdvantages('t', withProcess(), { estimator: 'grpo', processRewardWeight: 1, stdEpsilon: 0 });
    const s = Math.sqrt(0.5 / 5);
    close(a.perCall![0], [1, 1 + 0.5 / s]);
    close(a.perCall![1], [-1, -1 - 0.5 / s, -1]);
  });

  it('a kind of call that is right less often is not pushed down in every group: calls equal at their position get no process term', () => {
    // every rollout: tool call wrong (0), answer right (1); only the outcome differs
    const g: RolloutScore[] = [
      { rolloutId: 'a', outcomeReward: 1, processRewards: [0, 1] },
      { rolloutId: 'b', outcomeReward: 0, processRewards: [0, 1] },
    ];
    const a = computeGroupAdvantages('t', g, { estimator: 'dr_grpo', processRewardWeight: 3 });
    expect(a.perCall).toEqual([
      [0.5, 0.5],
      [-0.5, -0.5],
    ]);
  });

  it('λ = 0 (default) broadcasts the outcome advantage to every call', () => {
    const a = computeGroupAdvantages('t', withProcess(), { estimator: 'dr_grpo' });
    expect(a.perCall).toEqual([
      [0.5, 0.5],
      [-0.5, -0.5, -0.5],
    ]);
  });

  it('equal outcomes but varying process rewards still carry signal (not zero-variance)', () => {
    const g: RolloutScore[] = [
      { rolloutId: 'a', outcomeReward: 1, processRewards: [1] },
      { rolloutId: 'b', outcomeReward: 1, processRewards: [0] },
    ];
    const a = computeGroupAdvantages('t', g, { estimator: 'dr_grpo', processRewardWeight: 1 });
    expect(a.perRollout).toEqual([0, 0]);
    close(a.perCall!.flat(), [0.5, -0.5]);
    expect(a.zeroVariance).toBe(false);
  });

  it('a rollout missing process rewards while others carry them is an error', () => {
    const g = withProcess();
    delete g[1].processRewards;
    expect(() => computeGroupAdvantages('t', g, { estimator: 'grpo' })).toThrow(/group|rollouts\[1\]\.processRewards/);
  });
});

describe('validation names the bad field', () => {
  const cases: [string, () => unknown, RegExp][] = [
    ['empty group', () => computeGroupAdvantages('t', [], { estimator: 'grpo' }), /rollouts: must be a non-empty group/],
    ['NaN reward', () => computeGroupAdvantages('t', group([1, Number.NaN]), { estimator: 'grpo' }), /rollouts\[1\]\.outcomeReward/],
    ['infinite reward', () => computeGroupAdvantages('t', group([Infinity]), { estimator: 'grpo' }), /rollouts\[0\]\.outcomeReward/],
    ['duplicate id', () => computeGroupAdvantages('t', [...group([1]), ...group([0])], { estimator: 'grpo' }), /rollouts\[1\]\.rolloutId/],
    [
      'NaN process reward',
      () => computeGroupAdvantages('t', [{ rolloutId: 'a', outcomeReward: 1, processRewards: [Number.NaN] }], { estimator: 'grpo' }),
      /processRewards\[0\]/,
    ],
    ['unknown estimator', () => computeGroupAdvantages('t', group([1]), { estimator: 'ppo' as never }), /cfg\.estimator/],
    ['negative stdEpsilon', () => computeGroupAdvantages('t', group([1]), { estimator: 'grpo', stdEpsilon: -1 }), /cfg\.stdEpsilon/],
    ['unknown key', () => computeGroupAdvantages('t', group([1]), { estimator: 'grpo', normalise: true } as never), /cfg\.normalise/],
    ['empty taskId', () => computeGroupAdvantages('', group([1]), { estimator: 'grpo' }), /taskId/],
    ['empty batch', () => computeBatchAdvantages([], { estimator: 'reinforce_pp' }), /groups/],
  ];
  for (const [name, fn, re] of cases)
    it(name, () => {
      expect(fn).toThrow(AdvantageInputError);
      expect(fn).toThrow(re);
    });
});
