import { describe, expect, it } from 'vitest';
import {
  commonEvalVersion,
  pairedDifference,
  duringEvaluation,
  heldOutAt,
  heldOutFinal,
  lagDistribution,
  rewardOfLast,
  throughput,
  trainClock,
  type RunRecord,
} from './e2e-metrics';

function run(over: Partial<RunRecord>): RunRecord {
  return {
    label: 'async-cispo',
    mode: 'async',
    loss: 'cispo',
    seed: 1,
    trainSeconds: 100,
    rolloutsCompleted: 0,
    trainerBusySeconds: 0,
    admissionBlockedSeconds: { capacity: 0, version: 0, slots: 0 },
    capacityHeld: { running: 0, untrained: 0, awaitingVersion: 0 },
    steps: [],
    rewards: [],
    evals: [],
    staleness: [],
    rlStoppedBy: 'seconds',
    ...over,
  };
}

describe('e2e bench figures', () => {
  it('puts times on the train clock: since the trainer started, evaluations inside the run taken out', () => {
    // the starting evaluation [0, 10] precedes the trainer's start at 10; one in the loop [30, 40]
    const intervals: [number, number][] = [
      [0, 10],
      [30, 40],
    ];
    expect([5, 10, 20, 30, 35, 40, 60].map((t) => trainClock(t, 10, intervals))).toEqual([0, 0, 10, 20, 20, 20, 40]);
    expect([20, 35, 40].map((t) => duringEvaluation(t, intervals))).toEqual([false, true, false]);
  });

  it('measures throughput over the train clock and the trainer idle share', () => {
    const t = throughput(
      run({
        rolloutsCompleted: 500,
        trainerBusySeconds: 25,
        steps: [
          { version: 1, trainS: 20, totalTokens: 10_000, uniqueTokens: 1000, skipped: false },
          { version: 2, trainS: 40, totalTokens: 10_000, uniqueTokens: 1000, skipped: false },
          { version: 2, trainS: 60, totalTokens: 10_000, uniqueTokens: 1000, skipped: true },
        ],
      }),
      64,
    );
    expect(t).toEqual({
      trajectoriesPerS: 5,
      trainedTrajectoriesPerS: 1.28,
      trainedTokensPerS: 200,
      uniqueTokensPerS: 20,
      trainerIdle: 0.75,
      steps: 2,
    });
  });

  it('takes the train reward of the last share of rollouts finished by a time, and held-out success per version', () => {
    const r = run({
      rewards: [
        [1, 0],
        [2, 0],
        [3, 1],
        [4, 1],
        [200, 1],
      ],
      evals: [
        { version: 0, trainS: 0, success: 0.3, meanReward: 0.5 },
        { version: 10, trainS: 50, success: 0.4, meanReward: 0.6 },
        { version: 17, trainS: 100, success: 0.45, meanReward: 0.7 },
      ],
    });
    expect(rewardOfLast(r, 0.5, 100)).toBe(1); // the last 2 of the 4 finished by t = 100
    expect(rewardOfLast(r, 1, 100)).toBe(0.5);
    expect(rewardOfLast(run({}), 0.2, 100)).toBeNaN();
    expect([heldOutAt(r, 10), heldOutAt(r, 11)]).toEqual([0.4, null]);
    expect(heldOutFinal(r)).toEqual({ version: 17, success: 0.45, meanReward: 0.7 });
  });

  it('compares runs at equal steps at the largest version all of them evaluated', () => {
    const at = (...versions: number[]) => run({ evals: versions.map((version) => ({ version, trainS: 0, success: 0, meanReward: 0 })) });
    expect(commonEvalVersion([at(0, 10, 20, 27), at(0, 10, 20, 24), at(0, 10, 20, 30, 33)])).toBe(20);
    expect(commonEvalVersion([at(0, 10), at(0, 4)])).toBeNull();
  });

  it('pools the lag histogram of trained output tokens: shares per lag, mean, max, the stale share', () => {
    const l = lagDistribution([run({ staleness: [50, 30, 10] }), run({ staleness: [0, 0, 0, 5, 5] })]);
    expect(l.tokens).toBe(100);
    expect(l.shares).toEqual([0.5, 0.3, 0.1, 0.1]);
    expect(l.mean).toBeCloseTo((30 + 20 + 15 + 20) / 100, 12);
    expect(l.max).toBe(4);
    expect(l.staleShare).toBeCloseTo(0.5, 12);
    expect(lagDistribution([run({ staleness: [] })])).toMatchObject({ tokens: 0, staleShare: 0 });
  });

  it('pairs the two losses by seed: mean difference and its standard error', () => {
    // differences 0.04, -0.01, 0.03: mean 0.02, sample sd sqrt(((0.02)^2 + (0.03)^2 + (0.01)^2) / 2) = sqrt(0.0007)
    const d = pairedDifference([
      [0.3, 0.26],
      [0.25, 0.26],
      [0.33, 0.3],
    ]);
    expect(d.n).toBe(3);
    expect(d.mean).toBeCloseTo(0.02, 12);
    expect(d.se).toBeCloseTo(Math.sqrt(0.0007 / 3), 12);
    expect(pairedDifference([[0.5, 0.4]]).se).toBeNaN();
    expect(pairedDifference([]).mean).toBeNaN();
  });
});
