// Train/inference mismatch statistics and the health verdict (verl's published thresholds:
// mean IS in [0.5, 2], ESS >= 0.3, IS std <= 1, |KL| <= 0.1; docs/algo/rollout_corr.md).

import { LossInputError } from './config';

export type FloatArray = Float32Array | Float64Array;

export interface HealthVerdict {
  ok: boolean;
  /** One line per threshold broken, naming the statistic, its value and the bound. */
  problems: string[];
}

export interface HealthThresholds {
  ratioMeanMin: number;
  ratioMeanMax: number;
  essMin: number;
  ratioStdMax: number;
  klAbsMax: number;
}

export const DEFAULT_HEALTH_THRESHOLDS: Readonly<HealthThresholds> = Object.freeze({
  ratioMeanMin: 0.5,
  ratioMeanMax: 2,
  essMin: 0.3,
  ratioStdMax: 1,
  klAbsMax: 0.1,
});

export interface LossStats {
  /** Statistics of the IS ratio π_ref/π_behaviour over the tokens with loss weight > 0 (π_ref: recomputed proxLogp when given, else the current logp). */
  ratioMean: number;
  ratioMin: number;
  ratioMax: number;
  ratioStd: number;
  /** Normalised effective sample size of that ratio: (Σr)² / (n·Σr²), in (0, 1]. */
  ess: number;
  /** Share of tokens whose clipped ratio lies above 1 + epsHigh / below 1 − epsLow (0 for reinforce_tis). */
  clipHighFrac: number;
  clipLowFrac: number;
  /** Share of tokens zeroed by a mask: the geometric sequence mask, CISPO's token mask, PPO's dual-clip. */
  maskedFrac: number;
  /** Share of tokens whose TIS weight (token or sequence) hit its cap. */
  tisTruncatedFrac: number;
  /** Share of all output tokens that arrived with loss weight 0 (compact filtering, padding). */
  zeroWeightFrac: number;
  /** Mean per-token entropy over tokens with loss weight > 0, when the caller gave entropies. */
  entropyMean?: number;
  /** Mean k3 of π_θ against the reference policy (ρ = π_ref/π_θ) over tokens with loss weight > 0, when every sample carried refLogp. */
  klRefK3?: number;
  /** Mean of k3 = r − log r − 1 (r = π_ref/π_behaviour), ≥ 0. */
  mismatchKlK3: number;
  /** Mean |log π_ref − log π_behaviour| (not clamped). */
  meanAbsDeltaLogp: number;
  /** Tokens with loss weight > 0 (the statistics' population). */
  tokens: number;
  health: HealthVerdict;
}

/** Running accumulator for ratio statistics; `logRatio` is log r (clamped by the caller), `delta` the unclamped log difference. */
export class RatioAccumulator {
  n = 0;
  sum = 0;
  sumSq = 0;
  min = Infinity;
  max = -Infinity;
  k3 = 0;
  absDelta = 0;

  add(logRatio: number, delta: number): void {
    const r = Math.exp(logRatio);
    this.n++;
    this.sum += r;
    this.sumSq += r * r;
    if (r < this.min) this.min = r;
    if (r > this.max) this.max = r;
    this.k3 += r - logRatio - 1;
    this.absDelta += Math.abs(delta);
  }

  /** Over zero tokens there is no evidence of drift: ratio 1, std 0, ESS 1, KL 0. */
  result(): {
    ratioMean: number;
    ratioMin: number;
    ratioMax: number;
    ratioStd: number;
    ess: number;
    mismatchKlK3: number;
    meanAbsDeltaLogp: number;
    tokens: number;
  } {
    if (this.n === 0)
      return { ratioMean: 1, ratioMin: 1, ratioMax: 1, ratioStd: 0, ess: 1, mismatchKlK3: 0, meanAbsDeltaLogp: 0, tokens: 0 };
    const mean = this.sum / this.n;
    const variance = Math.max(0, this.sumSq / this.n - mean * mean);
    return {
      ratioMean: mean,
      ratioMin: this.min,
      ratioMax: this.max,
      ratioStd: Math.sqrt(variance),
      ess: this.sumSq > 0 ? (this.sum * this.sum) / (this.n * this.sumSq) : 1,
      mismatchKlK3: this.k3 / this.n,
      meanAbsDeltaLogp: this.absDelta / this.n,
      tokens: this.n,
    };
  }
}

/** The health verdict of a batch's mismatch statistics against the thresholds (verl's by default). */
export function healthVerdict(
  stats: { ratioMean: number; ess: number; ratioStd: number; mismatchKlK3: number },
  thresholds: HealthThresholds = DEFAULT_HEALTH_THRESHOLDS,
): HealthVerdict {
  for (const k of ['ratioMean', 'ess', 'ratioStd', 'mismatchKlK3'] as const)
    if (typeof stats?.[k] !== 'number' || Number.isNaN(stats[k]))
      throw new LossInputError(`stats.${k}`, `must be a number, got ${String(stats?.[k])}`);
  for (const k of ['ratioMeanMin', 'ratioMeanMax', 'essMin', 'ratioStdMax', 'klAbsMax'] as const)
    if (typeof thresholds?.[k] !== 'number' || !Number.isFinite(thresholds[k]))
      throw new LossInputError(`thresholds.${k}`, `must be a finite number, got ${String(thresholds?.[k])}`);
  const problems: string[] = [];
  if (stats.ratioMean < thresholds.ratioMeanMin || stats.ratioMean > thresholds.ratioMeanMax)
    problems.push(`mean IS ratio ${stats.ratioMean.toPrecision(4)} outside [${thresholds.ratioMeanMin}, ${thresholds.ratioMeanMax}]`);
  if (stats.ess < thresholds.essMin) problems.push(`ESS ${stats.ess.toPrecision(4)} < ${thresholds.essMin}`);
  if (stats.ratioStd > thresholds.ratioStdMax) problems.push(`IS ratio std ${stats.ratioStd.toPrecision(4)} > ${thresholds.ratioStdMax}`);
  if (Math.abs(stats.mismatchKlK3) > thresholds.klAbsMax)
    problems.push(`mismatch KL (k3) ${stats.mismatchKlK3.toPrecision(4)} exceeds ${thresholds.klAbsMax} in magnitude`);
  return { ok: problems.length === 0, problems };
}

/**
 * Train/inference mismatch between the trainer's logprobs and the ones recorded at generation
 * (every token counts): mean |Δlogp| and mean k3 = r − log r − 1 with r = exp(logp − behaviourLogp)
 * (log-ratio clamped to ±logRatioClamp before exp, default 20).
 */
export function mismatchStats(
  pairs: { logp: FloatArray; behaviourLogp: FloatArray }[],
  opts: { logRatioClamp?: number } = {},
): { meanAbsDeltaLogp: number; klK3: number; tokens: number } {
  if (!Array.isArray(pairs)) throw new LossInputError('pairs', 'must be an array');
  const clamp = opts.logRatioClamp ?? 20;
  if (!Number.isFinite(clamp) || clamp <= 0) throw new LossInputError('logRatioClamp', `must be a finite number > 0, got ${clamp}`);
  const acc = new RatioAccumulator();
  pairs.forEach((p, i) => {
    if (!p || !ArrayBuffer.isView(p.logp) || !ArrayBuffer.isView(p.behaviourLogp))
      throw new LossInputError(`pairs[${i}]`, 'logp and behaviourLogp must be float arrays');
    if (p.logp.length !== p.behaviourLogp.length)
      throw new LossInputError(`pairs[${i}].behaviourLogp`, `has ${p.behaviourLogp.length} entries for ${p.logp.length} logp entries`);
    for (let t = 0; t < p.logp.length; t++) {
      if (!Number.isFinite(p.logp[t])) throw new LossInputError(`pairs[${i}].logp[${t}]`, `is not finite (${p.logp[t]})`);
      if (!Number.isFinite(p.behaviourLogp[t]))
        throw new LossInputError(`pairs[${i}].behaviourLogp[${t}]`, `is not finite (${p.behaviourLogp[t]})`);
      const d = p.logp[t] - p.behaviourLogp[t];
      acc.add(Math.max(-clamp, Math.min(clamp, d)), d);
    }
  });
  const r = acc.result();
  return { meanAbsDeltaLogp: r.meanAbsDeltaLogp, klK3: r.mismatchKlK3, tokens: r.tokens };
}
