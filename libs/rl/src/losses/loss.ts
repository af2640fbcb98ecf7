// The policy losses. Each is J = Σ_i c_i Σ_t w_{i,t} · κ_{i,t} · j_{i,t}, minimised as loss = −J:
//   w  the token's loss weight (0 = masked), κ the mismatch correction (TIS weight, geometric mask),
//   c_i the aggregation's normaliser for sample i, j the kind's per-token objective.
// dLdlogp[i][t] = −c_i · w · κ · ∂j/∂logp: what the engine's backward takes. Every quantity under a
// stop-gradient (CISPO's clipped weight, TIS weights, masks, the behaviour weight and the
// interpolated proximal policy of decoupled PPO) is read from `detachedLogp` (default: logp), as
// autograd would see `logp.detach()`; the finite-difference tests perturb logp with it held fixed.

import {
  Aggregation,
  AGGREGATIONS,
  DEFAULT_KL_LOG_RATIO_CAP,
  LossConfig,
  LossConfigError,
  LossInputError,
  validateLossConfig,
} from './config';
import { DEFAULT_HEALTH_THRESHOLDS, FloatArray, HealthThresholds, healthVerdict, LossStats, RatioAccumulator } from './stats';

export interface LossSample {
  /** log π_θ of each output token (the engine's forward; gradients flow through it). */
  logp: FloatArray;
  /** log π_behaviour of each output token, recorded by the gateway at generation. */
  behaviourLogp: FloatArray;
  /** Recomputed log π_prox (decoupled PPO 'recomputed'; PPO's anchor and the TIS reference when given). */
  proxLogp?: FloatArray;
  /** log π_ref of each output token under the fixed reference policy (required when klCoef > 0; a constant to the loss). */
  refLogp?: FloatArray;
  /** One advantage for the sample, or one per output token. */
  advantage: number | FloatArray;
  /** Loss weight, per sample or per token (default 1; 0 = masked, e.g. compact filtering). Must be >= 0. */
  weight?: number | FloatArray;
  /** Policy version that produced each output token (decoupled PPO 'interpolated' needs it). */
  versions?: Uint32Array;
  /** Required by aggregation 'trajectory': the trajectory this per-call sample belongs to. */
  trajectoryId?: string;
  /** Required by aggregation 'group': the rollout group (prompt) the sample belongs to. */
  groupId?: string;
}

export interface LossOptions {
  /** Per-token entropy of the current policy (same shape as logp); only averaged into stats.entropyMean. */
  entropy?: FloatArray[];
  /** The value logp has under a stop-gradient (default logp itself). */
  detachedLogp?: FloatArray[];
  healthThresholds?: HealthThresholds;
}

export interface LossResult {
  /** The value to minimise, −J. */
  loss: number;
  /** ∂loss/∂logp per sample, per output token. */
  dLdlogp: Float32Array[];
  stats: LossStats;
}

function checkArray(a: unknown, len: number, field: string): asserts a is FloatArray {
  if (!(a instanceof Float32Array) && !(a instanceof Float64Array))
    throw new LossInputError(field, 'must be a Float32Array or Float64Array');
  if (a.length !== len) throw new LossInputError(field, `has ${a.length} entries for ${len} output tokens`);
  for (let t = 0; t < a.length; t++) if (!Number.isFinite(a[t])) throw new LossInputError(`${field}[${t}]`, `is not finite (${a[t]})`);
}

function validateSample(
  s: LossSample,
  i: number,
  cfg: LossConfig,
  detached: FloatArray | undefined,
  entropy: FloatArray | undefined,
): void {
  const f = `samples[${i}]`;
  if (!s || typeof s !== 'object') throw new LossInputError(f, 'must be an object');
  if (!(s.logp instanceof Float32Array) && !(s.logp instanceof Float64Array))
    throw new LossInputError(`${f}.logp`, 'must be a Float32Array or Float64Array');
  const L = s.logp.length;
  checkArray(s.logp, L, `${f}.logp`);
  checkArray(s.behaviourLogp, L, `${f}.behaviourLogp`);
  if (s.proxLogp !== undefined) checkArray(s.proxLogp, L, `${f}.proxLogp`);
  if (s.refLogp !== undefined) checkArray(s.refLogp, L, `${f}.refLogp`);
  else if ((cfg.klCoef ?? 0) > 0)
    throw new LossInputError(`${f}.refLogp`, 'is required by klCoef > 0 (the KL penalty to the reference policy)');
  if (detached !== undefined) checkArray(detached, L, `detachedLogp[${i}]`);
  if (entropy !== undefined) checkArray(entropy, L, `entropy[${i}]`);
  if (typeof s.advantage === 'number') {
    if (!Number.isFinite(s.advantage)) throw new LossInputError(`${f}.advantage`, `is not finite (${s.advantage})`);
  } else checkArray(s.advantage, L, `${f}.advantage`);
  if (s.weight !== undefined) {
    if (typeof s.weight === 'number') {
      if (!Number.isFinite(s.weight) || s.weight < 0) throw new LossInputError(`${f}.weight`, `must be finite and >= 0, got ${s.weight}`);
    } else {
      checkArray(s.weight, L, `${f}.weight`);
      for (let t = 0; t < L; t++) if (s.weight[t] < 0) throw new LossInputError(`${f}.weight[${t}]`, `must be >= 0, got ${s.weight[t]}`);
    }
  }
  if (s.versions !== undefined) {
    if (!(s.versions instanceof Uint32Array)) throw new LossInputError(`${f}.versions`, 'must be a Uint32Array');
    if (s.versions.length !== L) throw new LossInputError(`${f}.versions`, `has ${s.versions.length} entries for ${L} output tokens`);
  }
  const needsProx = cfg.kind === 'decoupled_ppo' && cfg.prox?.mode === 'recomputed';
  const interpolated = cfg.kind === 'decoupled_ppo' && cfg.prox?.mode === 'interpolated';
  if (needsProx && s.proxLogp === undefined)
    throw new LossInputError(`${f}.proxLogp`, "is required by decoupled_ppo with prox.mode 'recomputed'");
  if (interpolated) {
    if (s.proxLogp !== undefined)
      throw new LossInputError(`${f}.proxLogp`, "is given but prox.mode is 'interpolated' (the proximal logp would be ambiguous)");
    if (s.versions === undefined) throw new LossInputError(`${f}.versions`, "are required by prox.mode 'interpolated'");
    const vc = cfg.prox?.currentVersion ?? 0;
    for (let t = 0; t < L; t++)
      if (s.versions[t] > vc)
        throw new LossInputError(`${f}.versions[${t}]`, `version ${s.versions[t]} is newer than prox.currentVersion ${vc}`);
  }
  if (cfg.kind === 'ppo' && (cfg.correction?.tokenTis || cfg.correction?.seqTis) && s.proxLogp === undefined)
    throw new LossInputError(
      `${f}.proxLogp`,
      'PPO with TIS needs the recomputed proxLogp: without it the PPO ratio and the TIS ratio are the same π_θ/π_behaviour, counted twice',
    );
  if (cfg.aggregation === 'trajectory' && (typeof s.trajectoryId !== 'string' || s.trajectoryId === ''))
    throw new LossInputError(`${f}.trajectoryId`, "is required by aggregation 'trajectory'");
  if (cfg.aggregation === 'group' && (typeof s.groupId !== 'string' || s.groupId === ''))
    throw new LossInputError(`${f}.groupId`, "is required by aggregation 'group'");
}

const weightAt = (s: LossSample, t: number): number => (s.weight === undefined ? 1 : typeof s.weight === 'number' ? s.weight : s.weight[t]);
const advantageAt = (s: LossSample, t: number): number => (typeof s.advantage === 'number' ? s.advantage : s.advantage[t]);

/**
 * Per-sample normaliser c_i. n_i = tokens of sample i with loss weight > 0 (counted before
 * any correction mask, so masking never inflates the other tokens' gradients).
 *  token_mean          c = 1/Σ_i n_i                               (the design's 1/Σ|o_i|, over the batch)
 *  trajectory          c_i = 1/(N_τ · T): N_τ = Σ n over all samples (calls) of i's trajectory τ,
 *                      T = trajectories with N_τ > 0 (slime: a trajectory split in calls counts once)
 *  group               c_i = 1/(N_g · G): N_g over i's group, G = groups with N_g > 0 (ScaleRL prompt-level)
 *  seq_mean_token_mean c_i = 1/(n_i · S): S = samples with n_i > 0
 *  constant            c = 1/constantNormalizer                    (Dr. GRPO)
 * A sample with n_i = 0 contributes nothing (c_i = 0).
 */
export function aggregationCoefficients(
  samples: readonly LossSample[],
  aggregation: Aggregation,
  constantNormalizer?: number,
): Float64Array {
  if (!AGGREGATIONS.includes(aggregation))
    throw new LossConfigError('aggregation', `must be one of ${AGGREGATIONS.join(', ')}, got ${String(aggregation)}`);
  if (
    aggregation === 'constant' &&
    (typeof constantNormalizer !== 'number' || !Number.isFinite(constantNormalizer) || constantNormalizer <= 0)
  )
    throw new LossConfigError('constantNormalizer', `must be a finite number > 0, got ${String(constantNormalizer)}`);
  if (!Array.isArray(samples)) throw new LossInputError('samples', 'must be an array');
  samples.forEach((s, i) => {
    if (!s || !(s.logp instanceof Float32Array || s.logp instanceof Float64Array))
      throw new LossInputError(`samples[${i}].logp`, 'must be a Float32Array or Float64Array');
    if (s.weight !== undefined) {
      if (typeof s.weight === 'number') {
        if (!Number.isFinite(s.weight) || s.weight < 0)
          throw new LossInputError(`samples[${i}].weight`, `must be finite and >= 0, got ${s.weight}`);
      } else {
        checkArray(s.weight, s.logp.length, `samples[${i}].weight`);
        for (let t = 0; t < s.weight.length; t++)
          if (s.weight[t] < 0) throw new LossInputError(`samples[${i}].weight[${t}]`, `must be >= 0, got ${s.weight[t]}`);
      }
    }
    if (aggregation === 'trajectory' && (typeof s.trajectoryId !== 'string' || s.trajectoryId === ''))
      throw new LossInputError(`samples[${i}].trajectoryId`, "is required by aggregation 'trajectory'");
    if (aggregation === 'group' && (typeof s.groupId !== 'string' || s.groupId === ''))
      throw new LossInputError(`samples[${i}].groupId`, "is required by aggregation 'group'");
  });
  const n = samples.map((s) => {
    let k = 0;
    for (let t = 0; t < s.logp.length; t++) if (weightAt(s, t) > 0) k++;
    return k;
  });
  const c = new Float64Array(samples.length);
  const byKey = (key: (s: LossSample) => string) => {
    const tot = new Map<string, number>();
    samples.forEach((s, i) => tot.set(key(s), (tot.get(key(s)) ?? 0) + n[i]));
    const live = [...tot.values()].filter((v) => v > 0).length;
    samples.forEach((s, i) => (c[i] = n[i] > 0 ? 1 / ((tot.get(key(s)) ?? 0) * live) : 0));
  };
  switch (aggregation) {
    case 'token_mean': {
      const total = n.reduce((a, b) => a + b, 0);
      n.forEach((k, i) => (c[i] = k > 0 ? 1 / total : 0));
      break;
    }
    case 'trajectory':
      byKey((s) => s.trajectoryId ?? '');
      break;
    case 'group':
      byKey((s) => s.groupId ?? '');
      break;
    case 'seq_mean_token_mean': {
      const live = n.filter((k) => k > 0).length;
      n.forEach((k, i) => (c[i] = k > 0 ? 1 / (k * live) : 0));
      break;
    }
    case 'constant':
      n.forEach((k, i) => (c[i] = k > 0 ? 1 / (constantNormalizer ?? NaN) : 0));
      break;
  }
  return c;
}

/**
 * Loss value, ∂loss/∂logp and statistics for a batch of per-call samples (see the README's
 * "Losses" for each kind's formula). Validates the configuration and every input first and
 * throws LossConfigError / LossInputError naming the bad field.
 */
export function computeLoss(samples: LossSample[], cfg: LossConfig, opts: LossOptions = {}): LossResult {
  validateLossConfig(cfg);
  if (!Array.isArray(samples) || samples.length === 0) throw new LossInputError('samples', 'must be a non-empty array');
  if (opts.detachedLogp !== undefined && (!Array.isArray(opts.detachedLogp) || opts.detachedLogp.length !== samples.length))
    throw new LossInputError('detachedLogp', `must hold one array per sample (${samples.length})`);
  if (opts.entropy !== undefined && (!Array.isArray(opts.entropy) || opts.entropy.length !== samples.length))
    throw new LossInputError('entropy', `must hold one array per sample (${samples.length})`);
  samples.forEach((s, i) => validateSample(s, i, cfg, opts.detachedLogp?.[i], opts.entropy?.[i]));

  const C = cfg.logRatioClamp;
  const clampLr = (x: number) => (x > C ? C : x < -C ? -C : x);
  const lo = 1 - cfg.epsLow;
  const hi = 1 + cfg.epsHigh;
  const tokenTis = cfg.correction?.tokenTis;
  const seqTis = cfg.correction?.seqTis;
  const geo = cfg.correction?.geoMask;
  const maskLo = cfg.cispoMask ? 1 - cfg.cispoMask.epsLow : -Infinity;
  const maskHi = cfg.cispoMask ? 1 + cfg.cispoMask.epsHigh : Infinity;
  const dualC = cfg.dualClip;
  const coef = aggregationCoefficients(samples, cfg.aggregation, cfg.constantNormalizer);

  const acc = new RatioAccumulator();
  let loss = 0;
  let allTokens = 0;
  let clipHigh = 0;
  let clipLow = 0;
  let masked = 0;
  let truncated = 0;
  let entropySum = 0;
  const beta = cfg.klCoef ?? 0;
  const capKl = cfg.klLogRatioCap ?? DEFAULT_KL_LOG_RATIO_CAP;
  let klRefSum = 0;
  const dLdlogp: Float32Array[] = [];

  samples.forEach((s, i) => {
    const L = s.logp.length;
    const d = opts.detachedLogp?.[i] ?? s.logp;
    const b = s.behaviourLogp;
    const grad = new Float32Array(L);
    dLdlogp.push(grad);
    allTokens += L;
    // π_ref: the reference of the mismatch statistics, TIS and the geometric mask.
    const ref = s.proxLogp ?? d;
    // The proximal logp of decoupled PPO (a constant under the gradient).
    let prox: FloatArray = b;
    if (cfg.kind === 'decoupled_ppo') {
      if (cfg.prox?.mode === 'recomputed' && s.proxLogp) prox = s.proxLogp;
      else if (cfg.prox?.mode === 'interpolated' && s.versions) {
        const vc = cfg.prox.currentVersion ?? 0;
        const versions = s.versions;
        const p = new Float64Array(L);
        for (let t = 0; t < L; t++) {
          const vb = versions[t];
          const alpha = vc === vb ? 0 : Math.min(1, Math.max(0, (vc - 1 - vb) / (vc - vb)));
          p[t] = b[t] + alpha * (d[t] - b[t]);
        }
        prox = p;
      }
    }
    // Sequence-level quantities over the tokens with weight > 0.
    let live = 0;
    let sumRefLr = 0;
    for (let t = 0; t < L; t++)
      if (weightAt(s, t) > 0) {
        live++;
        sumRefLr += clampLr(ref[t] - b[t]);
        const delta = ref[t] - b[t];
        acc.add(clampLr(delta), delta);
        if (opts.entropy) entropySum += opts.entropy[i][t];
      }
    let seqKappa = 1;
    let seqCapped = false;
    if (geo && live > 0) {
      const g = Math.exp(sumRefLr / live);
      if (g < geo.low || g > geo.high) {
        seqKappa = 0;
        masked += live;
      }
    }
    // Sequence TIS: on π_ref/π_b for PPO, on π_θ/π_b (the loss's own IS weight) for reinforce_tis.
    let seqIs = 1;
    if (seqTis && live > 0) {
      let sumLr = 0;
      if (cfg.kind === 'reinforce_tis') {
        for (let t = 0; t < L; t++) if (weightAt(s, t) > 0) sumLr += clampLr(d[t] - b[t]);
      } else sumLr = sumRefLr;
      const logCap = Math.log(seqTis.cap);
      seqCapped = sumLr > logCap;
      seqIs = Math.exp(Math.min(sumLr, logCap));
      if (seqCapped) truncated += live;
    }
    const ci = coef[i];
    for (let t = 0; t < L; t++) {
      const w = weightAt(s, t);
      if (w === 0) continue;
      const A = advantageAt(s, t);
      const lp = s.logp[t];
      let kappa = seqKappa;
      let j: number;
      let dj: number;
      switch (cfg.kind) {
        case 'cispo': {
          const r = Math.exp(clampLr(d[t] - b[t]));
          if (r > hi) clipHigh++;
          else if (r < lo) clipLow++;
          const rc = r > hi ? hi : r < lo ? lo : r;
          // M1's token mask M (cispoMask): no gradient once r left the band in the direction A pushes.
          if ((A > 0 && r > maskHi) || (A < 0 && r < maskLo)) {
            if (kappa !== 0) masked++; // not counted twice under the geometric mask
            j = 0;
            dj = 0;
            break;
          }
          j = rc * A * lp;
          dj = rc * A;
          break;
        }
        case 'ppo':
        case 'decoupled_ppo': {
          const anchor = cfg.kind === 'ppo' ? (s.proxLogp ?? b) : prox;
          const rawLr = lp - anchor[t];
          const lr = clampLr(rawLr);
          const r = Math.exp(lr);
          const rDet = Math.exp(clampLr(d[t] - anchor[t]));
          if (rDet > hi) clipHigh++;
          else if (rDet < lo) clipLow++;
          const rc = r > hi ? hi : r < lo ? lo : r;
          const unclipped = r * A;
          const clipped = rc * A;
          // min(r·A, clip(r)·A): the gradient flows only through the unclipped branch, and not at all where the log-ratio is clamped.
          j = Math.min(unclipped, clipped);
          dj = unclipped <= clipped && rawLr === lr ? r * A : 0;
          // Dual-clip: a negative-advantage token past r = c keeps the constant c·A and no gradient.
          if (dualC !== undefined && A < 0 && j < dualC * A) {
            j = dualC * A;
            dj = 0;
            if (kappa !== 0) masked++;
          }
          if (cfg.kind === 'decoupled_ppo') {
            let bw = Math.exp(clampLr(anchor[t] - b[t]));
            if (tokenTis && bw > tokenTis.cap) {
              bw = tokenTis.cap;
              truncated++;
            }
            j *= bw;
            dj *= bw;
          } else if (tokenTis) {
            let tw = Math.exp(clampLr(ref[t] - b[t]));
            if (tw > tokenTis.cap) {
              tw = tokenTis.cap;
              truncated++;
            }
            kappa *= tw;
          } else if (seqTis) kappa *= seqIs;
          break;
        }
        case 'reinforce_tis': {
          let is: number;
          if (tokenTis) {
            is = Math.exp(clampLr(d[t] - b[t]));
            if (is > tokenTis.cap) {
              is = tokenTis.cap;
              truncated++;
            }
          } else is = seqIs;
          j = is * A * lp;
          dj = is * A;
          break;
        }
      }
      const scale = ci * w * kappa;
      loss -= scale * j;
      grad[t] = -scale * dj;
      if (s.refLogp) {
        // k3 of the sampled token against the reference (x = log ρ), continued along its tangent
        // beyond the cap so its slope stays bounded; not under the mismatch correction κ (a
        // regulariser of π_θ, not a policy-gradient term).
        const x = clampLr(s.refLogp[t] - lp);
        const xc = Math.min(x, capKl);
        const rho = Math.exp(xc);
        const k3 = rho - 1 - xc + (rho - 1) * (x - xc);
        klRefSum += k3;
        if (beta > 0) {
          loss += ci * w * beta * k3;
          grad[t] += ci * w * beta * (1 - rho);
        }
      }
    }
  });

  const ratio = acc.result();
  const tokens = ratio.tokens;
  const frac = (k: number) => (tokens > 0 ? k / tokens : 0);
  const core = {
    ratioMean: ratio.ratioMean,
    ratioMin: ratio.ratioMin,
    ratioMax: ratio.ratioMax,
    ratioStd: ratio.ratioStd,
    ess: ratio.ess,
    clipHighFrac: frac(clipHigh),
    clipLowFrac: frac(clipLow),
    maskedFrac: frac(masked),
    tisTruncatedFrac: frac(truncated),
    zeroWeightFrac: allTokens > 0 ? (allTokens - tokens) / allTokens : 0,
    mismatchKlK3: ratio.mismatchKlK3,
    meanAbsDeltaLogp: ratio.meanAbsDeltaLogp,
    tokens,
  };
  const stats: LossStats = {
    ...core,
    ...(opts.entropy ? { entropyMean: tokens > 0 ? entropySum / tokens : 0 } : {}),
    ...(samples.every((x) => x.refLogp !== undefined) ? { klRefK3: tokens > 0 ? klRefSum / tokens : 0 } : {}),
    health: healthVerdict(core, opts.healthThresholds ?? DEFAULT_HEALTH_THRESHOLDS),
  };
  return { loss, dLdlogp, stats };
}
