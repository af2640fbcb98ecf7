// Loss configuration: the kinds, the aggregation modes, the mismatch corrections, their
// defaults and the combinations that are refused because they would count one importance
// ratio twice. See libs/rl/README.md ("Losses") for the formulas.

export type LossKind = 'cispo' | 'ppo' | 'decoupled_ppo' | 'reinforce_tis';
export type Aggregation = 'token_mean' | 'trajectory' | 'group' | 'seq_mean_token_mean' | 'constant';

export const LOSS_KINDS: readonly LossKind[] = ['cispo', 'ppo', 'decoupled_ppo', 'reinforce_tis'];
export const AGGREGATIONS: readonly Aggregation[] = ['token_mean', 'trajectory', 'group', 'seq_mean_token_mean', 'constant'];

export interface LossCorrection {
  /** Token-level truncated IS: multiply each token by sg(min(π_ref/π_behaviour, cap)). Default cap 2 when given without one. */
  tokenTis?: { cap: number };
  /** Sequence-level truncated IS: multiply a sample by sg(min(Π_t π_ref/π_behaviour, cap)). Default cap 5. */
  seqTis?: { cap: number };
  /** Geometric sequence mask: a sample whose geometric-mean ratio π_ref/π_behaviour leaves [low, high] gets weight 0. Default [0.99, 1.01]. */
  geoMask?: { low: number; high: number };
}

export interface ProxConfig {
  /**
   * 'recomputed': every sample carries proxLogp (a forward pass of the weights before this
   * step). 'interpolated': log π_prox = log π_b + α(sg(log π_θ) − log π_b) per token, with
   * α = (v_c − 1 − v_b)/(v_c − v_b) clamped to [0, 1] (AReaL's loglinear approximation),
   * v_b the token's version, v_c = currentVersion; α = 0 when v_b ≥ v_c − 1. The proximal policy
   * is version v_c − 1.
   */
  mode: 'recomputed' | 'interpolated';
  /**
   * Required for 'interpolated': AReaL's `current_version`, the version this optimizer step
   * produces. The weights that computed logp (before the update) are version currentVersion − 1,
   * the proximal policy; a token version above currentVersion is an error.
   */
  currentVersion?: number;
}

export interface LossConfig {
  kind: LossKind;
  /** Clip band of the ratio: [1 − epsLow, 1 + epsHigh]. CISPO default [0, 5] (epsLow 1, epsHigh 4); PPO kinds 0.2 / 0.28 (clip-higher). */
  epsLow: number;
  epsHigh: number;
  aggregation: Aggregation;
  /** Only with aggregation 'constant': J = (1/constantNormalizer) Σ_i Σ_t … (Dr. GRPO uses max tokens × samples). */
  constantNormalizer?: number;
  correction?: LossCorrection;
  /** Only with kind 'decoupled_ppo' (default { mode: 'recomputed' }). */
  prox?: ProxConfig;
  /**
   * Only with kind 'cispo': MiniMax-M1's token mask M (its unified formulation). A token gets no
   * gradient once its ratio r = π_θ/π_behaviour has left [1 − epsLow, 1 + epsHigh] in the direction
   * its advantage pushes (A > 0 and r > 1 + epsHigh, or A < 0 and r < 1 − epsLow): PPO-clip's trust
   * region on CISPO's clipped IS weight. Absent: M = 1 everywhere (M1's default). Given as {}:
   * DEFAULT_CISPO_MASK. For several optimizer steps per batch on stale tokens (README, "Losses").
   */
  cispoMask?: { epsLow: number; epsHigh: number };
  /**
   * Only with kinds 'ppo' and 'decoupled_ppo': dual-clip c (Ye et al. 2020; verl's clip_ratio_c and
   * SkyRL's default 3). For a token with A < 0 the objective is max(min(r·A, clip(r)·A), c·A): once
   * its ratio passes c it gets no gradient, where plain PPO-clip pushes it down with a weight that
   * grows with r (a token the policy made far likelier since it was sampled). Must be > 1. Absent: none.
   */
  dualClip?: number;
  /** Log-ratios are clamped to [−logRatioClamp, logRatioClamp] before exp (default 20): exp(89) overflows and 0·inf is NaN. */
  logRatioClamp: number;
  /**
   * β of a KL penalty to a fixed reference policy (the run's starting weights): loss += β · Σ_i c_i
   * Σ_t w · k3, k3 = ρ − 1 − log ρ with ρ = π_ref/π_θ of the sampled token (DeepSeekMath GRPO's
   * estimator), ∂k3/∂log π_θ = 1 − ρ. Every sample must carry refLogp. Absent or 0: no penalty.
   */
  klCoef?: number;
  /**
   * Above this log ρ the penalty continues linearly (its gradient stays β·(1 − e^cap), ≈ −19β at the
   * default 3) instead of growing with ρ: one sampled token the policy had pushed to 1e-9 of the
   * reference's probability otherwise carried a k3 of ~1e6 and, after clipping, was the whole step.
   * Absent: DEFAULT_KL_LOG_RATIO_CAP.
   */
  klLogRatioCap?: number;
}

/** A configuration that is malformed or refused; `field` names the offending key (dotted path). */
export class LossConfigError extends Error {
  override name = 'LossConfigError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

/** Loss inputs that disagree or are not finite; `field` names the offending input, e.g. samples[3].behaviourLogp. */
export class LossInputError extends Error {
  override name = 'LossInputError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

export const DEFAULT_TOKEN_TIS_CAP = 2;
export const DEFAULT_SEQ_TIS_CAP = 5;
export const DEFAULT_GEO_MASK = { low: 0.99, high: 1.01 } as const;
export const DEFAULT_LOG_RATIO_CLAMP = 20;
export const DEFAULT_KL_LOG_RATIO_CAP = 3;
export const DEFAULT_CISPO_MASK = { epsLow: 0.2, epsHigh: 0.28 } as const;

const EPS_DEFAULTS: Record<LossKind, { epsLow: number; epsHigh: number }> = {
  cispo: { epsLow: 1, epsHigh: 4 },
  ppo: { epsLow: 0.2, epsHigh: 0.28 },
  decoupled_ppo: { epsLow: 0.2, epsHigh: 0.28 },
  reinforce_tis: { epsLow: 0.2, epsHigh: 0.28 },
};

const CONFIG_KEYS = new Set([
  'kind',
  'epsLow',
  'epsHigh',
  'aggregation',
  'constantNormalizer',
  'correction',
  'prox',
  'logRatioClamp',
  'klCoef',
  'klLogRatioCap',
  'cispoMask',
  'dualClip',
]);
const CORRECTION_KEYS = new Set(['tokenTis', 'seqTis', 'geoMask']);

function finitePositive(v: unknown, field: string): void {
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0)
    throw new LossConfigError(field, `must be a finite number > 0, got ${String(v)}`);
}

/** What lossConfig takes: any field may be left out, the mask's bounds too. */
export type LossConfigInput = Omit<Partial<LossConfig>, 'cispoMask'> & { cispoMask?: { epsLow?: number; epsHigh?: number } };

/**
 * Validates a partial configuration and fills the defaults: CISPO with the clip band [0, 5]
 * (epsLow 1, epsHigh 4), token_mean aggregation, log-ratio clamp 20, no correction
 * (reinforce_tis gets tokenTis { cap: 2 } when no TIS is given: it is its IS weight).
 * Correction entries given as `{}` get their defaults (cap 2 / cap 5 / [0.99, 1.01]).
 */
export function lossConfig(input: LossConfigInput = {}): LossConfig {
  if (input === null || typeof input !== 'object') throw new LossConfigError('config', 'must be an object');
  for (const k of Object.keys(input)) if (!CONFIG_KEYS.has(k)) throw new LossConfigError(k, 'unknown loss config key');
  const kind = input.kind ?? 'cispo';
  if (!LOSS_KINDS.includes(kind)) throw new LossConfigError('kind', `must be one of ${LOSS_KINDS.join(', ')}, got ${String(kind)}`);
  const eps = EPS_DEFAULTS[kind];
  let correction: LossCorrection | undefined;
  if (input.correction !== undefined) {
    const c = input.correction;
    if (c === null || typeof c !== 'object') throw new LossConfigError('correction', 'must be an object');
    for (const k of Object.keys(c)) if (!CORRECTION_KEYS.has(k)) throw new LossConfigError(`correction.${k}`, 'unknown correction');
    correction = {};
    if (c.tokenTis !== undefined) correction.tokenTis = { cap: c.tokenTis?.cap ?? DEFAULT_TOKEN_TIS_CAP };
    if (c.seqTis !== undefined) correction.seqTis = { cap: c.seqTis?.cap ?? DEFAULT_SEQ_TIS_CAP };
    if (c.geoMask !== undefined)
      correction.geoMask = { low: c.geoMask?.low ?? DEFAULT_GEO_MASK.low, high: c.geoMask?.high ?? DEFAULT_GEO_MASK.high };
  }
  if (kind === 'reinforce_tis' && !correction?.tokenTis && !correction?.seqTis)
    correction = { ...correction, tokenTis: { cap: DEFAULT_TOKEN_TIS_CAP } };
  const cfg: LossConfig = {
    kind,
    epsLow: input.epsLow ?? eps.epsLow,
    epsHigh: input.epsHigh ?? eps.epsHigh,
    aggregation: input.aggregation ?? 'token_mean',
    logRatioClamp: input.logRatioClamp ?? DEFAULT_LOG_RATIO_CLAMP,
  };
  if (input.constantNormalizer !== undefined) cfg.constantNormalizer = input.constantNormalizer;
  if (input.klCoef !== undefined && input.klCoef !== 0) cfg.klCoef = input.klCoef;
  if (input.klLogRatioCap !== undefined) cfg.klLogRatioCap = input.klLogRatioCap;
  if (correction) cfg.correction = correction;
  if (input.cispoMask !== undefined) {
    const m = input.cispoMask as { epsLow?: number; epsHigh?: number } | null;
    if (m === null || typeof m !== 'object') throw new LossConfigError('cispoMask', 'must be an object ({} takes the defaults)');
    for (const k of Object.keys(m))
      if (k !== 'epsLow' && k !== 'epsHigh') throw new LossConfigError(`cispoMask.${k}`, 'unknown key (epsLow, epsHigh)');
    cfg.cispoMask = { epsLow: m.epsLow ?? DEFAULT_CISPO_MASK.epsLow, epsHigh: m.epsHigh ?? DEFAULT_CISPO_MASK.epsHigh };
  }
  if (input.dualClip !== undefined) cfg.dualClip = input.dualClip;
  if (input.prox !== undefined) cfg.prox = { ...input.prox };
  else if (kind === 'decoupled_ppo') cfg.prox = { mode: 'recomputed' };
  validateLossConfig(cfg);
  return cfg;
}

/** Checks a complete configuration (what computeLoss runs first); throws LossConfigError naming the field. */
export function validateLossConfig(cfg: LossConfig): void {
  if (cfg === null || typeof cfg !== 'object') throw new LossConfigError('config', 'must be an object');
  for (const k of Object.keys(cfg)) if (!CONFIG_KEYS.has(k)) throw new LossConfigError(k, 'unknown loss config key');
  if (!LOSS_KINDS.includes(cfg.kind)) throw new LossConfigError('kind', `must be one of ${LOSS_KINDS.join(', ')}, got ${String(cfg.kind)}`);
  if (typeof cfg.epsLow !== 'number' || !Number.isFinite(cfg.epsLow) || cfg.epsLow < 0 || cfg.epsLow > 1)
    throw new LossConfigError('epsLow', `must be in [0, 1] (the lower bound 1 − epsLow is then in [0, 1]), got ${String(cfg.epsLow)}`);
  if (typeof cfg.epsHigh !== 'number' || !Number.isFinite(cfg.epsHigh) || cfg.epsHigh < 0)
    throw new LossConfigError('epsHigh', `must be a finite number >= 0, got ${String(cfg.epsHigh)}`);
  if (!AGGREGATIONS.includes(cfg.aggregation))
    throw new LossConfigError('aggregation', `must be one of ${AGGREGATIONS.join(', ')}, got ${String(cfg.aggregation)}`);
  if (cfg.aggregation === 'constant') finitePositive(cfg.constantNormalizer, 'constantNormalizer');
  else if (cfg.constantNormalizer !== undefined)
    throw new LossConfigError('constantNormalizer', `is only used by aggregation 'constant', not '${cfg.aggregation}'`);
  finitePositive(cfg.logRatioClamp, 'logRatioClamp');
  if (cfg.klLogRatioCap !== undefined) finitePositive(cfg.klLogRatioCap, 'klLogRatioCap');
  if (cfg.klCoef !== undefined && (typeof cfg.klCoef !== 'number' || !Number.isFinite(cfg.klCoef) || cfg.klCoef < 0))
    throw new LossConfigError('klCoef', `must be a finite number >= 0, got ${String(cfg.klCoef)}`);
  if (cfg.cispoMask !== undefined) {
    if (cfg.kind !== 'cispo')
      throw new LossConfigError(
        'cispoMask',
        `is CISPO's token mask, not used by kind '${cfg.kind}' (PPO kinds mask through their clip already)`,
      );
    const m = cfg.cispoMask;
    if (m === null || typeof m !== 'object') throw new LossConfigError('cispoMask', 'must be an object');
    for (const k of Object.keys(m))
      if (k !== 'epsLow' && k !== 'epsHigh') throw new LossConfigError(`cispoMask.${k}`, 'unknown key (epsLow, epsHigh)');
    if (typeof m.epsLow !== 'number' || !Number.isFinite(m.epsLow) || m.epsLow < 0 || m.epsLow > 1)
      throw new LossConfigError('cispoMask.epsLow', `must be in [0, 1], got ${String(m.epsLow)}`);
    if (typeof m.epsHigh !== 'number' || !Number.isFinite(m.epsHigh) || m.epsHigh < 0)
      throw new LossConfigError('cispoMask.epsHigh', `must be a finite number >= 0, got ${String(m.epsHigh)}`);
  }
  if (cfg.dualClip !== undefined) {
    if (cfg.kind !== 'ppo' && cfg.kind !== 'decoupled_ppo')
      throw new LossConfigError(
        'dualClip',
        `is PPO-clip's lower bound for negative advantages, not used by kind '${cfg.kind}'${cfg.kind === 'cispo' ? " (CISPO's weight is already clipped at 1 + epsHigh)" : ''}`,
      );
    if (typeof cfg.dualClip !== 'number' || !Number.isFinite(cfg.dualClip) || cfg.dualClip <= 1)
      throw new LossConfigError('dualClip', `must be a finite number > 1 (verl and SkyRL use 3), got ${String(cfg.dualClip)}`);
  }
  const c = cfg.correction;
  if (c !== undefined) {
    if (c === null || typeof c !== 'object') throw new LossConfigError('correction', 'must be an object');
    for (const k of Object.keys(c)) if (!CORRECTION_KEYS.has(k)) throw new LossConfigError(`correction.${k}`, 'unknown correction');
    if (c.tokenTis !== undefined) finitePositive(c.tokenTis?.cap, 'correction.tokenTis.cap');
    if (c.seqTis !== undefined) finitePositive(c.seqTis?.cap, 'correction.seqTis.cap');
    if (c.geoMask !== undefined) {
      finitePositive(c.geoMask?.low, 'correction.geoMask.low');
      finitePositive(c.geoMask?.high, 'correction.geoMask.high');
      if (!(c.geoMask.low <= 1 && 1 <= c.geoMask.high))
        throw new LossConfigError('correction.geoMask', `band [${c.geoMask.low}, ${c.geoMask.high}] must contain 1`);
    }
    if (c.tokenTis && c.seqTis)
      throw new LossConfigError('correction.seqTis', 'token-level and sequence-level TIS together weight the same ratio twice; choose one');
    if (cfg.kind === 'cispo' && (c.tokenTis || c.seqTis))
      throw new LossConfigError(
        c.tokenTis ? 'correction.tokenTis' : 'correction.seqTis',
        'CISPO is anchored on the behaviour logprobs: its clipped weight already is the truncated importance ratio π_θ/π_behaviour, TIS on top would count it twice',
      );
    if (cfg.kind === 'decoupled_ppo' && c.seqTis)
      throw new LossConfigError(
        'correction.seqTis',
        'decoupled PPO already weights every token by π_prox/π_behaviour; a sequence TIS on the same ratio counts it twice (use tokenTis to cap that weight)',
      );
  }
  if (cfg.prox !== undefined) {
    if (cfg.kind !== 'decoupled_ppo') throw new LossConfigError('prox', `is only used by kind 'decoupled_ppo', not '${cfg.kind}'`);
    const p = cfg.prox;
    if (p === null || typeof p !== 'object' || (p.mode !== 'recomputed' && p.mode !== 'interpolated'))
      throw new LossConfigError('prox.mode', `must be 'recomputed' or 'interpolated', got ${String(p?.mode)}`);
    if (p.mode === 'interpolated') {
      if (typeof p.currentVersion !== 'number' || !Number.isInteger(p.currentVersion) || p.currentVersion < 0)
        throw new LossConfigError(
          'prox.currentVersion',
          `interpolated prox needs the current version as an integer >= 0, got ${String(p.currentVersion)}`,
        );
    } else if (p.currentVersion !== undefined) throw new LossConfigError('prox.currentVersion', "is only used by prox.mode 'interpolated'");
  } else if (cfg.kind === 'decoupled_ppo')
    throw new LossConfigError('prox', "decoupled_ppo needs prox ({ mode: 'recomputed' } or 'interpolated')");
  if (cfg.kind === 'reinforce_tis' && !c?.tokenTis && !c?.seqTis)
    throw new LossConfigError('correction', 'reinforce_tis needs correction.tokenTis or correction.seqTis (its truncated IS weight)');
}
