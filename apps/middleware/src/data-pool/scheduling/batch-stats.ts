import type { TrainBatchStats } from '@anvil/contracts';
import { msOf } from '../sql';

/** What a batch's statistics are computed from, gathered by the cut. */
export interface BatchFacts {
  trajectoryIds: string[];
  samples: { groupId: string }[];
  /** Tokens over the samples (prompt + output) and the tree's unique tokens. */
  totalTokens: number;
  uniqueTokens: number;
  outputTokens: number;
  /** Per sample, the policy version of each output token. */
  outputVersions: Uint32Array[];
  policyVersion: number;
  stalenessK: number;
  /** Queue position of each trajectory (trajectoryIds order) and the newest position queued. */
  positions: number[];
  newestPosition: number;
  /** How far out of order each pick was (the Windowed FIFO's take). */
  outOfOrder: number[];
  difficulties: number[];
  populationDifficulty: number | null;
  lossMasked: number;
  /** The trainer's last acknowledgement and the last batch cut before this one (epoch ms from the scheduler row). */
  lastTrainedMs: string | null;
  lastBatchMs: string | null;
  now: number;
}

const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / xs.length;

/** Staleness per output token, in versions behind the batch's policy version. */
export function outputStaleness(outputVersions: Uint32Array[], policyVersion: number, k: number): TrainBatchStats['staleness'] {
  let sum = 0,
    max = 0,
    older = 0,
    n = 0;
  for (const v of outputVersions)
    for (let i = 0; i < v.length; i++) {
      const age = Math.max(0, policyVersion - v[i]);
      sum += age;
      if (age > max) max = age;
      if (age > k) older++;
      n++;
    }
  return { k, mean: n ? sum / n : 0, max, shareOlderThanK: n ? older / n : 0 };
}

/** The batch statistics train_batch.created carries and data_pool_batch_stats keeps. */
export function batchStats(f: BatchFacts): TrainBatchStats {
  const lags = f.positions.map((p) => f.newestPosition - p);
  const lastTrained = msOf(f.lastTrainedMs);
  const lastBatch = msOf(f.lastBatchMs);
  return {
    trajectories: f.trajectoryIds.length,
    samples: f.samples.length,
    groups: new Set(f.samples.map((x) => x.groupId)).size,
    totalTokens: f.totalTokens,
    uniqueTokens: f.uniqueTokens,
    outputTokens: f.outputTokens,
    sharing: f.totalTokens > 0 ? Math.max(0, 1 - f.uniqueTokens / f.totalTokens) : 0,
    staleness: outputStaleness(f.outputVersions, f.policyVersion, f.stalenessK),
    positionLag: { mean: mean(lags), max: Math.max(...lags) },
    outOfOrder: { mean: mean(f.outOfOrder), max: Math.max(...f.outOfOrder) },
    difficulty: {
      batchMean: f.difficulties.length ? mean(f.difficulties) : null,
      populationMean: f.populationDifficulty,
    },
    lossMasked: f.lossMasked,
    // the trainer waited from its last acknowledgement until this batch existed (0 when a batch was already waiting)
    trainerWaitMs: lastTrained === null ? null : lastBatch === null || lastBatch <= lastTrained ? Math.max(0, f.now - lastTrained) : 0,
  };
}
