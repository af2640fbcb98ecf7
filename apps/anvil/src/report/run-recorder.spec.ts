import { describe, expect, it } from 'vitest';
import type { EvaluationCompletedV1 } from '@anvil/contracts';
import type { TrainerStepEvent } from '@anvil/trainer';
import { RunRecorder } from './run-recorder';

/** A step as it arrives over HTTP: JSON turned the trainer's NaN into null. */
function step(version: number, over: { loss?: number | null; skipped?: string | null } = {}): TrainerStepEvent {
  const report = {
    loss: over.loss === undefined ? 0.5 : over.loss,
    gradNorm: 1.5,
    stats: { ratioMean: 1, clipHighFrac: 0, entropyMean: 2 },
    mismatch: { meanAbsDeltaLogp: 1e-8, klK3: 1e-14, tokens: 10 },
    mismatchBySplit: [{ key: 'all', meanAbsDeltaLogp: 1e-8, klK3: 1e-14, tokens: 10 }],
    samples: 4,
    outputTokens: 10,
    totalTokens: 100,
    uniqueTokens: 25,
    sharing: 0.75,
    packs: 1,
    seconds: 0.1,
    skipped: over.skipped ?? null,
  };
  return {
    batchId: `b${version}`,
    batchStep: version - 1,
    fromVersion: version - 1,
    version,
    trainerStep: version,
    reports: [report],
    staleness: { mean: 1, max: 2, shareOlderThan1: 0.5, tokens: 10 },
    stalenessHistogram: [4, 5, 1],
    idleMs: 3000,
    busyMs: 1000,
    published: true,
    checkpointed: false,
    batchStats: null,
  } as unknown as TrainerStepEvent;
}

const evaluation = (policyVersion: number, successRate: number) =>
  ({
    evalId: `e${policyVersion}`,
    taskSetId: 't',
    policyVersion,
    results: [{}, {}],
    successRate,
    meanReward: successRate,
    versionDrift: 0,
    startedAt: 0,
    completedAt: 0,
  }) as unknown as EvaluationCompletedV1;

describe('RunRecorder', () => {
  it("gives each step the mean reward of the train rollouts finished since the previous one, and reads JSON's null as NaN", () => {
    const rec = new RunRecorder();
    rec.trainRolloutCompleted(1, 1);
    rec.trainRolloutCompleted(0, 2);
    rec.trainRolloutCompleted(null, 3); // an aborted rollout: counted, no reward
    const first = rec.step(step(1), 4);
    const second = rec.step(step(2, { loss: null, skipped: 'non-finite loss' }), 5);
    expect(first).toMatchObject({
      step: 1,
      version: 1,
      reward: 0.5,
      loss: 0.5,
      sharing: 0.75,
      trainSeconds: 1,
      idleSeconds: 3,
      uniqueTokens: 25,
      totalTokens: 100,
    });
    expect(second.reward).toBeNull();
    expect(second.loss).toBeNaN();
    expect(rec.completedTrain).toBe(3);
    expect(rec.rolloutTimeline).toEqual([
      [1, 1],
      [2, 2],
      [3, 3],
    ]);
    expect(rec.staleness).toEqual([8, 10, 2]);
  });

  it('sums up a batch trained in mini-batches: means over the applied steps, the token-weighted mismatch, skipped only when no step was applied', () => {
    const base = step(1).reports[0];
    const part = (o: Partial<typeof base>) => ({ ...base, ...o });
    const batch = (reports: (typeof base)[]) => ({ ...step(1), reports }) as TrainerStepEvent;
    const rec = new RunRecorder();
    // Each mini-batch's tokens of the current version were measured on that version's weights; the row weighs them by tokens.
    const row = rec.step(
      batch([
        part({ loss: 0.2, gradNorm: 1, uniqueTokens: 10, totalTokens: 40, mismatch: { meanAbsDeltaLogp: 2e-8, klK3: 4e-14, tokens: 30 } }),
        part({
          loss: 0.4,
          gradNorm: 3,
          uniqueTokens: 30,
          totalTokens: 60,
          stats: { ...base.stats, ratioMean: 0.5, clipHighFrac: 0.5, entropyMean: 1 } as typeof base.stats,
          mismatch: { meanAbsDeltaLogp: 6e-8, klK3: 8e-14, tokens: 10 },
        }),
        part({ loss: NaN, gradNorm: NaN, skipped: 'non-finite loss', mismatch: { meanAbsDeltaLogp: NaN, klK3: NaN, tokens: 0 } }),
      ]),
      1,
    );
    expect(row).toMatchObject({
      loss: 0.30000000000000004,
      gradNorm: 2,
      ratioMean: 0.75,
      clipHighFrac: 0.25,
      entropy: 1.5,
      mismatchTokens: 40,
      uniqueTokens: 65,
      totalTokens: 200,
      skipped: null,
    });
    expect(row.sharing).toBeCloseTo(1 - 65 / 200, 12);
    expect(row.mismatchAbs).toBeCloseTo(3e-8, 20);
    expect(row.mismatchKl).toBeCloseTo(5e-14, 26);
    expect(row.klRef).toBeNull();
    const none = rec.step(
      batch([part({ loss: NaN, skipped: 'non-finite loss' }), part({ loss: NaN, skipped: 'non-finite gradient norm' })]),
      2,
    );
    expect(none.skipped).toBe('non-finite loss; non-finite gradient norm');
    expect(none.loss).toBeNaN();
  });

  it("sums up the run with the embedded job's summary fields", () => {
    const rec = new RunRecorder();
    rec.evaluated(evaluation(0, 0.4), 1);
    rec.step(step(1), 2);
    rec.step(step(2, { loss: null, skipped: 'non-finite loss' }), 3);
    rec.evaluated(evaluation(2, 0.55), 4);
    const s = rec.summary({
      seed: 3,
      wallClockSeconds: 12.34,
      finalVersion: 2,
      rlStoppedBy: 'steps',
      warmStart: { cached: true },
      finalEvalPinnedTo: 2,
    });
    expect(s).toMatchObject({
      heldOutSuccess: { warmStart: 0.4, final: 0.55 },
      heldOutGainPoints: 15,
      seed: 3,
      wallClockSeconds: 12.3,
      rlSteps: 1,
      skippedSteps: 1,
      finalVersion: 2,
      evaluations: 2,
      trainerIdleFraction: 0.75,
      meanSharing: 0.75,
      evalVersionDrift: 0,
      finalEvalPinnedTo: 2,
    });
    expect(s.mismatch).toEqual({ meanAbsDeltaLogp: 1e-8, klK3: 1e-14, tokens: 20 });
    expect(rec.evals.map((e) => [e.version, e.step])).toEqual([
      [0, 0],
      [2, 2],
    ]);
  });
});
