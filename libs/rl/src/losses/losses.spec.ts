import { describe, expect, it } from 'vitest';
import { seededRandom } from '../random';
import {
  Aggregation,
  aggregationCoefficients,
  computeLoss,
  healthVerdict,
  LossConfig,
  lossConfig,
  LossConfigError,
  LossInputError,
  LossSample,
  mismatchStats,
} from './index';

const f64 = (xs: number[]) => Float64Array.from(xs);
const LN6 = Math.log(6);
const LN2 = Math.log(2);

/** One sample with IS ratios π_θ/π_b = [6, 1, 0.5] (behaviour logp −2, −1, −0.5). */
function ratioSample(advantage: number, weight?: number[]): LossSample {
  const b = [-2, -1, -0.5];
  return {
    logp: f64([b[0] + LN6, b[1], b[2] - LN2]),
    behaviourLogp: f64(b),
    advantage,
    ...(weight ? { weight: f64(weight) } : {}),
  };
}

function expectArrayClose(actual: ArrayLike<number>, expected: number[], digits = 5) {
  expect(actual.length).toBe(expected.length);
  expected.forEach((e, i) => expect(actual[i]).toBeCloseTo(e, digits));
}

describe('lossConfig', () => {
  it('defaults to CISPO with the [0, 5] band, token_mean, clamp 20 and no correction', () => {
    expect(lossConfig()).toEqual({ kind: 'cispo', epsLow: 1, epsHigh: 4, aggregation: 'token_mean', logRatioClamp: 20 });
    expect(lossConfig({ kind: 'ppo' })).toMatchObject({ epsLow: 0.2, epsHigh: 0.28 });
    expect(lossConfig({ kind: 'decoupled_ppo' }).prox).toEqual({ mode: 'recomputed' });
    expect(lossConfig({ kind: 'reinforce_tis' }).correction).toEqual({ tokenTis: { cap: 2 } });
  });

  it('fills correction defaults: token TIS cap 2, sequence TIS cap 5, geometric mask [0.99, 1.01]', () => {
    expect(
      lossConfig({ kind: 'ppo', correction: { tokenTis: {} as { cap: number }, geoMask: {} as { low: number; high: number } } }).correction,
    ).toEqual({
      tokenTis: { cap: 2 },
      geoMask: { low: 0.99, high: 1.01 },
    });
    expect(lossConfig({ kind: 'ppo', correction: { seqTis: {} as { cap: number } } }).correction).toEqual({ seqTis: { cap: 5 } });
  });

  it('refuses combinations that count one ratio twice, naming the field', () => {
    const refuse = (input: Partial<LossConfig>, field: string) => {
      try {
        lossConfig(input);
      } catch (e) {
        expect(e).toBeInstanceOf(LossConfigError);
        expect((e as LossConfigError).field).toBe(field);
        return;
      }
      throw new Error(`accepted ${JSON.stringify(input)}`);
    };
    refuse({ kind: 'cispo', correction: { tokenTis: { cap: 2 } } }, 'correction.tokenTis');
    refuse({ kind: 'cispo', correction: { seqTis: { cap: 5 } } }, 'correction.seqTis');
    refuse({ kind: 'ppo', correction: { tokenTis: { cap: 2 }, seqTis: { cap: 5 } } }, 'correction.seqTis');
    refuse({ kind: 'decoupled_ppo', correction: { seqTis: { cap: 5 } } }, 'correction.seqTis');
  });

  it('rejects bad values and unknown keys, naming the field', () => {
    const field = (input: unknown) => {
      try {
        lossConfig(input as Partial<LossConfig>);
      } catch (e) {
        expect(e).toBeInstanceOf(LossConfigError);
        return (e as LossConfigError).field;
      }
      return 'accepted';
    };
    expect(field({ epsLow: 1.5 })).toBe('epsLow');
    expect(field({ epsLow: -0.1 })).toBe('epsLow');
    expect(field({ epsHigh: Number.NaN })).toBe('epsHigh');
    expect(field({ aggregation: 'sum' })).toBe('aggregation');
    expect(field({ aggregation: 'constant' })).toBe('constantNormalizer');
    expect(field({ aggregation: 'constant', constantNormalizer: 0 })).toBe('constantNormalizer');
    expect(field({ constantNormalizer: 10 })).toBe('constantNormalizer');
    expect(field({ kind: 'dapo' })).toBe('kind');
    expect(field({ epsilonHigh: 4 })).toBe('epsilonHigh');
    expect(field({ logRatioClamp: Infinity })).toBe('logRatioClamp');
    expect(field({ kind: 'ppo', correction: { tokenTis: { cap: -1 } } })).toBe('correction.tokenTis.cap');
    expect(field({ kind: 'ppo', correction: { geoMask: { low: 1.01, high: 1.02 } } })).toBe('correction.geoMask');
    expect(field({ kind: 'ppo', correction: { icepop: {} } })).toBe('correction.icepop');
    expect(field({ kind: 'cispo', prox: { mode: 'recomputed' } })).toBe('prox');
    expect(field({ kind: 'decoupled_ppo', prox: { mode: 'interpolated' } })).toBe('prox.currentVersion');
    expect(field({ kind: 'decoupled_ppo', prox: { mode: 'loglinear' } })).toBe('prox.mode');
  });
});

describe('CISPO (hand-computed)', () => {
  const cfg = lossConfig(); // [0, 5]

  it('a token above the band keeps a gradient at the clipped weight; others at their ratio', () => {
    const { loss, dLdlogp, stats } = computeLoss([ratioSample(1)], cfg);
    // token_mean over 3 tokens; weights clip(6)=5, 1, 0.5
    expectArrayClose(dLdlogp[0], [-5 / 3, -1 / 3, -0.5 / 3]);
    const lp = [-2 + LN6, -1, -0.5 - LN2];
    expect(loss).toBeCloseTo(-(5 * lp[0] + 1 * lp[1] + 0.5 * lp[2]) / 3, 6);
    expect(stats.clipHighFrac).toBeCloseTo(1 / 3, 9);
    expect(stats.clipLowFrac).toBe(0);
  });

  it('negative advantages flip the gradient, with the same clipped weights', () => {
    const { dLdlogp } = computeLoss([ratioSample(-1)], cfg);
    expectArrayClose(dLdlogp[0], [5 / 3, 1 / 3, 0.5 / 3]);
  });

  it('masked tokens contribute nothing, not even an overflowing ratio (0·inf)', () => {
    const s = ratioSample(1, [1, 0, 1]);
    s.logp[1] = 0;
    s.behaviourLogp[1] = -300; // exp(300) would overflow without the clamp
    const { loss, dLdlogp, stats } = computeLoss([s], cfg);
    expectArrayClose(dLdlogp[0], [-5 / 2, 0, -0.5 / 2]);
    expect(Number.isFinite(loss)).toBe(true);
    expect(stats.tokens).toBe(2);
    expect(stats.zeroWeightFrac).toBeCloseTo(1 / 3, 9);
  });

  it('the log-ratio is clamped before exp: a 300-nat gap on a live token gives a finite clipped weight', () => {
    const s: LossSample = { logp: f64([-0.1]), behaviourLogp: f64([-300.1]), advantage: 1 };
    const r = computeLoss([s], cfg);
    expect(r.dLdlogp[0][0]).toBeCloseTo(-5, 9);
    expect(r.stats.ratioMax).toBeCloseTo(Math.exp(20), -3);
    expect(Number.isFinite(r.stats.mismatchKlK3)).toBe(true);
  });

  it('unclipped CISPO equals REINFORCE with (untruncated) IS weights', () => {
    const samples = [ratioSample(0.7), ratioSample(-1.3, [1, 1, 0])];
    const cispo = computeLoss(samples, lossConfig({ epsHigh: 1e6 }));
    const reinforce = computeLoss(samples, lossConfig({ kind: 'reinforce_tis', correction: { tokenTis: { cap: 1e7 } } }));
    expect(cispo.loss).toBeCloseTo(reinforce.loss, 9);
    cispo.dLdlogp.forEach((g, i) => expectArrayClose(g, Array.from(reinforce.dLdlogp[i]), 9));
    expectArrayClose(cispo.dLdlogp[0], [(-6 * 0.7) / 5, (-1 * 0.7) / 5, (-0.5 * 0.7) / 5], 6);
  });

  it('a lower bound (epsLow < 1) lifts small ratios to 1 − epsLow', () => {
    const { dLdlogp, stats } = computeLoss([ratioSample(1)], lossConfig({ epsLow: 0.2, epsHigh: 0.2 }));
    expectArrayClose(dLdlogp[0], [-1.2 / 3, -1 / 3, -0.8 / 3]);
    expect(stats.clipLowFrac).toBeCloseTo(1 / 3, 9);
  });
});

describe("CISPO's token mask (MiniMax-M1's M, cispoMask)", () => {
  const masked = lossConfig({ cispoMask: {} }); // [0, 5] weights, mask band [0.8, 1.28]

  it('A > 0: the token whose ratio rose above 1 + epsHigh gets no gradient; the others keep CISPO weights', () => {
    const { loss, dLdlogp, stats } = computeLoss([ratioSample(1)], masked);
    expectArrayClose(dLdlogp[0], [0, -1 / 3, -0.5 / 3]); // ratios 6 (masked), 1, 0.5 (below the band: A > 0 keeps it)
    const lp = [-1, -0.5 - LN2];
    expect(loss).toBeCloseTo(-(1 * lp[0] + 0.5 * lp[1]) / 3, 6);
    expect(stats.maskedFrac).toBeCloseTo(1 / 3, 9);
  });

  it('A < 0: the token whose ratio fell below 1 − epsLow gets none; the one above the band keeps 5·A', () => {
    const { dLdlogp, stats } = computeLoss([ratioSample(-1)], masked);
    expectArrayClose(dLdlogp[0], [5 / 3, 1 / 3, 0]);
    expect(stats.maskedFrac).toBeCloseTo(1 / 3, 9);
  });

  it('the band is its own knob, apart from the weight clip: lower bound 0.6 masks the 0.5 ratio, 0.49 does not; upper 6.5 keeps the 6', () => {
    expectArrayClose(computeLoss([ratioSample(-1)], lossConfig({ cispoMask: { epsLow: 0.4 } })).dLdlogp[0], [5 / 3, 1 / 3, 0]);
    expectArrayClose(computeLoss([ratioSample(-1)], lossConfig({ cispoMask: { epsLow: 0.51 } })).dLdlogp[0], [5 / 3, 1 / 3, 0.5 / 3]);
    expectArrayClose(computeLoss([ratioSample(1)], lossConfig({ cispoMask: { epsHigh: 5.5 } })).dLdlogp[0], [-5 / 3, -1 / 3, -0.5 / 3]);
  });

  it('defaults to 0.2 / 0.28, and is refused outside CISPO or with a bad band, naming the field', () => {
    expect(masked.cispoMask).toEqual({ epsLow: 0.2, epsHigh: 0.28 });
    expect(lossConfig().cispoMask).toBeUndefined();
    expect(() => lossConfig({ kind: 'ppo', cispoMask: {} } as Partial<LossConfig>)).toThrow(/cispoMask: .*not used by kind 'ppo'/);
    expect(() => lossConfig({ cispoMask: { epsLow: 1.5 } } as Partial<LossConfig>)).toThrow(/cispoMask.epsLow: must be in \[0, 1\]/);
    expect(() => lossConfig({ cispoMask: { epsHigh: -1 } } as Partial<LossConfig>)).toThrow(/cispoMask.epsHigh/);
    expect(() => lossConfig({ cispoMask: { epsLow: 0.2, epsHigh: 0.2, x: 1 } } as unknown as Partial<LossConfig>)).toThrow(
      /cispoMask.x: unknown key/,
    );
  });
});

describe("PPO's dual-clip (verl's clip_ratio_c)", () => {
  // ratioSample's ratios are 6, 1 and 0.5; PPO's band is [0.8, 1.28]
  it('A < 0: the token whose ratio passed c keeps c·A and no gradient; plain PPO pushes it with weight r', () => {
    const plain = computeLoss([ratioSample(-1)], lossConfig({ kind: 'ppo' }));
    expectArrayClose(plain.dLdlogp[0], [6 / 3, 1 / 3, 0]); // min(6·A, 1.28·A) = 6·A: the unclipped branch, weight 6
    expect(plain.loss).toBeCloseTo((6 + 1 + 0.8) / 3, 9);
    const dual = computeLoss([ratioSample(-1)], lossConfig({ kind: 'ppo', dualClip: 3 }));
    expectArrayClose(dual.dLdlogp[0], [0, 1 / 3, 0]);
    expect(dual.loss).toBeCloseTo((3 + 1 + 0.8) / 3, 9);
    expect(dual.stats.maskedFrac).toBeCloseTo(1 / 3, 9);
    expect(plain.stats.maskedFrac).toBe(0);
  });

  it('leaves ratios below c and positive advantages alone', () => {
    expectArrayClose(computeLoss([ratioSample(-1)], lossConfig({ kind: 'ppo', dualClip: 7 })).dLdlogp[0], [6 / 3, 1 / 3, 0]);
    const up = computeLoss([ratioSample(1)], lossConfig({ kind: 'ppo', dualClip: 3 }));
    expectArrayClose(up.dLdlogp[0], [0, -1 / 3, -0.5 / 3]); // 6 is clipped at 1.28 (no gradient), 0.5 is below the band on the unclipped branch
    expect(up.stats.maskedFrac).toBe(0);
  });

  it('decoupled PPO: the dual-clipped objective is weighted by π_prox/π_behaviour like the rest', () => {
    const s = { ...ratioSample(-1), proxLogp: f64([-2, -1, -0.5]).map((x) => x + Math.log(2)) };
    // ratios against prox: 3, 0.5, 0.25; behaviour weight 2 each
    const r = computeLoss([s], lossConfig({ kind: 'decoupled_ppo', dualClip: 2, correction: { tokenTis: { cap: 10 } } }));
    expect(r.loss).toBeCloseTo((2 * 2 + 2 * 0.8 + 2 * 0.8) / 3, 9);
    expectArrayClose(r.dLdlogp[0], [0, 0, 0]);
  });

  it('is refused outside the PPO kinds and at c <= 1, naming the field', () => {
    expect(lossConfig({ kind: 'ppo', dualClip: 3 }).dualClip).toBe(3);
    expect(lossConfig({ kind: 'ppo' }).dualClip).toBeUndefined();
    expect(() => lossConfig({ kind: 'cispo', dualClip: 3 })).toThrow(/dualClip: .*not used by kind 'cispo'/);
    expect(() => lossConfig({ kind: 'reinforce_tis', dualClip: 3 })).toThrow(/dualClip/);
    expect(() => lossConfig({ kind: 'ppo', dualClip: 1 })).toThrow(/dualClip: must be a finite number > 1/);
    expect(() => lossConfig({ kind: 'ppo', dualClip: Number.NaN })).toThrow(/dualClip/);
  });
});

describe('KL penalty to the reference policy (hand-computed)', () => {
  const sample = (): LossSample => ({ logp: f64([-1, -2]), behaviourLogp: f64([-1, -2]), refLogp: f64([-1, -1]), advantage: 0 });

  it('adds β·k3 per token (ρ = π_ref/π_θ) under the aggregation, and β·(1 − ρ) to dLoss/dlogp', () => {
    const { loss, dLdlogp, stats } = computeLoss([sample()], lossConfig({ klCoef: 0.5 }));
    // token_mean over 2 tokens: token 0 has ρ = 1 (k3 = 0), token 1 ρ = e (k3 = e − 1 − 1)
    expect(loss).toBeCloseTo((0.5 * (Math.E - 2)) / 2, 9);
    expectArrayClose(dLdlogp[0], [0, (0.5 * (1 - Math.E)) / 2], 6);
    expect(stats.klRefK3).toBeCloseTo((Math.E - 2) / 2, 9);
  });

  it('a token pushed below the reference is pulled back up, with a slope capped at log ρ = klLogRatioCap (default 3) and k3 continued along its tangent', () => {
    const s = sample();
    s.logp[1] = -6; // 5 nats below the reference's −1
    const { loss, dLdlogp, stats } = computeLoss([s], lossConfig({ klCoef: 0.1 }));
    const e3 = Math.exp(3);
    expect(dLdlogp[0][1]).toBeCloseTo((0.1 * (1 - e3)) / 2, 6); // minimising the loss raises logp, at most 19β per token
    expect(stats.klRefK3).toBeCloseTo((e3 - 1 - 3 + (e3 - 1) * 2) / 2, 6);
    expect(loss).toBeCloseTo((0.1 * (e3 - 1 - 3 + (e3 - 1) * 2)) / 2, 6);
    // a wider cap keeps the plain k3 up to it
    const wide = computeLoss([s], lossConfig({ klCoef: 0.1, klLogRatioCap: 6 }));
    expect(wide.dLdlogp[0][1]).toBeCloseTo((0.1 * (1 - Math.exp(5))) / 2, 5);
    expect(() => lossConfig({ klLogRatioCap: 0 })).toThrow(/klLogRatioCap/);
  });

  it('klCoef 0 (or absent) leaves the loss untouched and still reports the KL when refLogp is given', () => {
    const plain = computeLoss([ratioSample(1)], lossConfig());
    const withRef = { ...ratioSample(1), refLogp: f64([-3, -3, -3]) };
    const zero = computeLoss([withRef], lossConfig({ klCoef: 0 }));
    expect(zero.loss).toBe(plain.loss);
    expect(Array.from(zero.dLdlogp[0])).toEqual(Array.from(plain.dLdlogp[0]));
    expect(zero.stats.klRefK3).toBeGreaterThan(0);
    expect(plain.stats.klRefK3).toBeUndefined();
  });

  it('refuses klCoef > 0 without refLogp, and a negative or non-finite klCoef', () => {
    expect(() => computeLoss([ratioSample(1)], lossConfig({ klCoef: 0.1 }))).toThrow(/samples\[0\]\.refLogp: is required by klCoef/);
    expect(() => lossConfig({ klCoef: -1 })).toThrow(/klCoef/);
    expect(() => lossConfig({ klCoef: Number.NaN })).toThrow(/klCoef/);
    expect(() => computeLoss([{ ...ratioSample(1), refLogp: f64([0, Number.NaN, 0]) }], lossConfig({ klCoef: 0.1 }))).toThrow(
      /refLogp\[1\]/,
    );
  });
});

describe('PPO-clip / GRPO (hand-computed)', () => {
  const cfg = lossConfig({ kind: 'ppo' }); // [0.8, 1.28]

  it('a token above the band has no gradient for A > 0; below the band keeps it', () => {
    const { loss, dLdlogp, stats } = computeLoss([ratioSample(1)], cfg);
    expectArrayClose(dLdlogp[0], [0, -1 / 3, -0.5 / 3]);
    expect(loss).toBeCloseTo(-(1.28 + 1 + 0.5) / 3, 6);
    expect(stats.clipHighFrac).toBeCloseTo(1 / 3, 9);
    expect(stats.clipLowFrac).toBeCloseTo(1 / 3, 9);
  });

  it('negative advantages: above the band keeps its gradient (r·A), below has none', () => {
    const { loss, dLdlogp } = computeLoss([ratioSample(-1)], cfg);
    expectArrayClose(dLdlogp[0], [6 / 3, 1 / 3, 0]);
    expect(loss).toBeCloseTo((6 + 1 + 0.8) / 3, 6);
  });

  it('with proxLogp the PPO ratio is anchored on it and token TIS weights π_prox/π_b, capped', () => {
    const s: LossSample = { logp: f64([-1, -1]), behaviourLogp: f64([-2, -1.5]), proxLogp: f64([-1.1, -1]), advantage: 1 };
    const cfgTis = lossConfig({ kind: 'ppo', correction: { tokenTis: { cap: 2 } } });
    const { dLdlogp, stats } = computeLoss([s], cfgTis);
    // ratio vs prox: e^0.1, e^0 (both in band); TIS: min(e^0.9, 2) = 2, e^0.5
    expectArrayClose(dLdlogp[0], [-(2 * Math.exp(0.1)) / 2, -Math.exp(0.5) / 2]);
    expect(stats.tisTruncatedFrac).toBeCloseTo(0.5, 9);
    // the mismatch statistics use the recomputed reference: ratios e^0.9, e^0.5
    expect(stats.ratioMean).toBeCloseTo((Math.exp(0.9) + Math.exp(0.5)) / 2, 9);
  });

  it('sequence TIS weights every token of a sample by min(Π ratio, cap)', () => {
    const s: LossSample = { logp: f64([-1, -1]), behaviourLogp: f64([-2, -1.5]), proxLogp: f64([-1, -1]), advantage: 1 };
    const low = computeLoss([s], lossConfig({ kind: 'ppo', correction: { seqTis: { cap: 5 } } }));
    expectArrayClose(low.dLdlogp[0], [-Math.exp(1.5) / 2, -Math.exp(1.5) / 2]); // e^1.5 = 4.48 < 5
    const capped = computeLoss([s], lossConfig({ kind: 'ppo', correction: { seqTis: { cap: 3 } } }));
    expectArrayClose(capped.dLdlogp[0], [-3 / 2, -3 / 2]);
    expect(capped.stats.tisTruncatedFrac).toBe(1);
  });

  it('refuses TIS without a recomputed proxLogp (it would weight π_θ/π_b twice)', () => {
    const cfgTis = lossConfig({ kind: 'ppo', correction: { tokenTis: { cap: 2 } } });
    expect(() => computeLoss([ratioSample(1)], cfgTis)).toThrow(LossInputError);
    expect(() => computeLoss([ratioSample(1)], cfgTis)).toThrow(/samples\[0\]\.proxLogp/);
  });

  it('the geometric sequence mask zeroes a sample whose mean log-ratio leaves the band', () => {
    const inBand: LossSample = { logp: f64([-1, -1]), behaviourLogp: f64([-1.005, -0.999]), advantage: 1 };
    const outBand: LossSample = { logp: f64([-1, -1]), behaviourLogp: f64([-1.05, -1]), advantage: 1 }; // geo mean e^0.025
    const { dLdlogp, stats } = computeLoss(
      [inBand, outBand],
      lossConfig({ kind: 'ppo', correction: { geoMask: { low: 0.99, high: 1.01 } } }),
    );
    expectArrayClose(dLdlogp[1], [0, 0]);
    expectArrayClose(dLdlogp[0], [-Math.exp(0.005) / 4, -Math.exp(-0.001) / 4]); // denominator keeps all 4 tokens
    expect(stats.maskedFrac).toBeCloseTo(0.5, 9);
  });
});

describe('decoupled PPO (hand-computed)', () => {
  it('recomputed: the clip is on π_θ/π_prox, the behaviour weight π_prox/π_b multiplies', () => {
    const s: LossSample = { logp: f64([-0.4, -0.4]), behaviourLogp: f64([-1, -1]), proxLogp: f64([-0.5, -1]), advantage: 2 };
    const { dLdlogp } = computeLoss([s], lossConfig({ kind: 'decoupled_ppo' }));
    // token 0: r = e^0.1 in band, bw = e^0.5; token 1: r = e^0.6 > 1.28 with A > 0: no gradient
    expectArrayClose(dLdlogp[0], [-(Math.exp(0.5) * Math.exp(0.1) * 2) / 2, 0]);
  });

  it('token TIS caps the behaviour weight instead of multiplying a second time', () => {
    const s: LossSample = { logp: f64([-0.4]), behaviourLogp: f64([-1.5]), proxLogp: f64([-0.5]), advantage: 1 };
    const { dLdlogp, stats } = computeLoss([s], lossConfig({ kind: 'decoupled_ppo', correction: { tokenTis: { cap: 2 } } }));
    expectArrayClose(dLdlogp[0], [-2 * Math.exp(0.1)]); // bw = min(e^1, 2)
    expect(stats.tisTruncatedFrac).toBe(1);
  });

  it('interpolated: log π_prox = log π_b + α(log π_θ − log π_b), α = (v_c − 1 − v_b)/(v_c − v_b)', () => {
    const b = [-1, -1, -1];
    const lp = [-0.9, -0.9, -0.9];
    const s: LossSample = { logp: f64(lp), behaviourLogp: f64(b), advantage: 1, versions: Uint32Array.from([3, 4, 5]) };
    const cfg = lossConfig({ kind: 'decoupled_ppo', prox: { mode: 'interpolated', currentVersion: 5 } });
    const { dLdlogp } = computeLoss([s], cfg);
    // v_b = 3: α = 1/2, prox = −0.95, r = e^0.05, bw = e^0.05; v_b = 4 and 5: α = 0, prox = b, r = e^0.1, bw = 1
    expectArrayClose(dLdlogp[0], [-(Math.exp(0.05) * Math.exp(0.05)) / 3, -Math.exp(0.1) / 3, -Math.exp(0.1) / 3]);
    expect(() => computeLoss([{ ...s, versions: Uint32Array.from([3, 4, 6]) }], cfg)).toThrow(/samples\[0\]\.versions\[2\]/);
    expect(() => computeLoss([{ ...s, versions: undefined }], cfg)).toThrow(/samples\[0\]\.versions/);
    expect(() => computeLoss([{ ...s, proxLogp: f64(b) }], cfg)).toThrow(/samples\[0\]\.proxLogp/);
  });

  it('recomputed mode requires proxLogp on every sample', () => {
    expect(() => computeLoss([ratioSample(1)], lossConfig({ kind: 'decoupled_ppo' }))).toThrow(/samples\[0\]\.proxLogp/);
  });
});

describe('REINFORCE with truncated IS (hand-computed)', () => {
  it('token TIS: sg(min(r, cap))·A·log π', () => {
    const { dLdlogp, stats } = computeLoss([ratioSample(1)], lossConfig({ kind: 'reinforce_tis' }));
    expectArrayClose(dLdlogp[0], [-2 / 3, -1 / 3, -0.5 / 3]);
    expect(stats.tisTruncatedFrac).toBeCloseTo(1 / 3, 9);
    expect(stats.clipHighFrac).toBe(0);
  });

  it('sequence TIS: the product of the ratios (6·1·0.5 = 3), capped', () => {
    const r = computeLoss([ratioSample(1)], lossConfig({ kind: 'reinforce_tis', correction: { seqTis: { cap: 5 } } }));
    expectArrayClose(r.dLdlogp[0], [-1, -1, -1]);
    const capped = computeLoss([ratioSample(1)], lossConfig({ kind: 'reinforce_tis', correction: { seqTis: { cap: 2 } } }));
    expectArrayClose(capped.dLdlogp[0], [-2 / 3, -2 / 3, -2 / 3]);
  });
});

describe('aggregation (hand-computed normalisers)', () => {
  const mk = (len: number, trajectoryId: string, groupId: string): LossSample => ({
    logp: f64(Array(len).fill(-1)),
    behaviourLogp: f64(Array(len).fill(-1)),
    advantage: 1,
    trajectoryId,
    groupId,
  });
  // s0: T1/g1 2 tokens, s1: T1/g2 3 tokens, s2: T2/g2 1 token
  const samples = [mk(2, 'T1', 'g1'), mk(3, 'T1', 'g2'), mk(1, 'T2', 'g2')];
  const cases: [Aggregation, number[], number?][] = [
    ['token_mean', [1 / 6, 1 / 6, 1 / 6]],
    ['trajectory', [1 / 10, 1 / 10, 1 / 2]],
    ['group', [1 / 4, 1 / 8, 1 / 8]],
    ['seq_mean_token_mean', [1 / 6, 1 / 9, 1 / 3]],
    ['constant', [1 / 10, 1 / 10, 1 / 10], 10],
  ];
  for (const [aggregation, expected, K] of cases)
    it(`${aggregation}`, () => {
      expectArrayClose(aggregationCoefficients(samples, aggregation, K), expected, 12);
      // r = 1, A = 1 under CISPO: dL/dlogp = −c_i on every token
      const { dLdlogp } = computeLoss(samples, lossConfig({ aggregation, ...(K ? { constantNormalizer: K } : {}) }));
      dLdlogp.forEach((g, i) => expectArrayClose(g, Array(g.length).fill(-expected[i]), 6));
    });

  it('a trajectory split into calls counts once: its calls share one denominator', () => {
    // the same 5 tokens of T1 as one sample or as two calls get the same total gradient mass
    const split = aggregationCoefficients([mk(2, 'T1', 'g'), mk(3, 'T1', 'g'), mk(4, 'T2', 'g')], 'trajectory');
    const whole = aggregationCoefficients([mk(5, 'T1', 'g'), mk(4, 'T2', 'g')], 'trajectory');
    expect(split[0] * 2 + split[1] * 3).toBeCloseTo(whole[0] * 5, 12);
    expect(split[2]).toBeCloseTo(whole[1], 12);
  });

  it('masked tokens are left out of the denominators', () => {
    const s = [{ ...mk(2, 'T1', 'g1'), weight: f64([1, 0]) }, mk(3, 'T1', 'g1')];
    expectArrayClose(aggregationCoefficients(s, 'token_mean'), [1 / 4, 1 / 4], 12);
    expectArrayClose(aggregationCoefficients(s, 'seq_mean_token_mean'), [1 / 2, 1 / 6], 12);
  });

  it('aggregationCoefficients validates what it reads', () => {
    expect(() => aggregationCoefficients([{ ...mk(2, 'T', 'g'), weight: f64([1, -1]) }], 'token_mean')).toThrow(
      /samples\[0\]\.weight\[1\]/,
    );
    expect(() => aggregationCoefficients([{ ...mk(2, 'T', 'g'), weight: f64([1]) }], 'token_mean')).toThrow(/samples\[0\]\.weight/);
    expect(() => aggregationCoefficients([mk(2, 'T', 'g')], 'constant')).toThrow(/constantNormalizer/);
    expect(() => aggregationCoefficients([mk(2, 'T', 'g')], 'sum' as never)).toThrow(/aggregation/);
  });

  it('trajectory and group need their ids', () => {
    const bare = { logp: f64([-1]), behaviourLogp: f64([-1]), advantage: 1 };
    expect(() => computeLoss([bare], lossConfig({ aggregation: 'trajectory' }))).toThrow(/samples\[0\]\.trajectoryId/);
    expect(() => computeLoss([bare], lossConfig({ aggregation: 'group' }))).toThrow(/samples\[0\]\.groupId/);
  });
});

describe('statistics and health', () => {
  it('ratio mean/min/max/std, ESS, k3 and mean |Δlogp| of ratios [6, 1, 0.5]', () => {
    const { stats } = computeLoss([ratioSample(1)], lossConfig(), { entropy: [f64([0.3, 0.6, 0.9])] });
    expect(stats.ratioMean).toBeCloseTo(2.5, 6);
    expect(stats.ratioMin).toBeCloseTo(0.5, 6);
    expect(stats.ratioMax).toBeCloseTo(6, 6);
    expect(stats.ratioStd).toBeCloseTo(Math.sqrt(37.25 / 3 - 6.25), 6);
    expect(stats.ess).toBeCloseTo(56.25 / 111.75, 6);
    expect(stats.mismatchKlK3).toBeCloseTo((6 - LN6 - 1 + 0 + 0.5 + LN2 - 1) / 3, 6);
    expect(stats.meanAbsDeltaLogp).toBeCloseTo((LN6 + LN2) / 3, 6);
    expect(stats.entropyMean).toBeCloseTo(0.6, 9);
    expect(stats.tokens).toBe(3);
    expect(stats.health.ok).toBe(false);
    expect(stats.health.problems).toHaveLength(3); // mean, std, KL; ESS 0.503 passes
    expect(stats.health.problems.join(' ')).toMatch(/mean IS ratio.*std.*KL/);
  });

  it('healthVerdict passes a calm batch and names each broken threshold', () => {
    expect(healthVerdict({ ratioMean: 1.01, ess: 0.95, ratioStd: 0.1, mismatchKlK3: 0.001 })).toEqual({ ok: true, problems: [] });
    const v = healthVerdict({ ratioMean: 0.4, ess: 0.2, ratioStd: 1.5, mismatchKlK3: 0.2 });
    expect(v.ok).toBe(false);
    expect(v.problems).toHaveLength(4);
    // boundaries are inclusive: exactly on a threshold passes
    expect(healthVerdict({ ratioMean: 2, ess: 0.3, ratioStd: 1, mismatchKlK3: 0.1 }).ok).toBe(true);
    expect(healthVerdict({ ratioMean: 0.5, ess: 0.3, ratioStd: 1, mismatchKlK3: -0.1 }).ok).toBe(true);
    expect(() => healthVerdict({ ratioMean: Number.NaN, ess: 1, ratioStd: 0, mismatchKlK3: 0 })).toThrow(/stats\.ratioMean/);
  });

  it('mismatchStats over pairs', () => {
    const m = mismatchStats([{ logp: f64([-1, -2]), behaviourLogp: f64([-1.1, -2]) }]);
    expect(m.tokens).toBe(2);
    expect(m.meanAbsDeltaLogp).toBeCloseTo(0.05, 9);
    expect(m.klK3).toBeCloseTo((Math.exp(0.1) - 0.1 - 1) / 2, 9);
    expect(() => mismatchStats([{ logp: f64([-1]), behaviourLogp: f64([-1, -2]) }])).toThrow(/pairs\[0\]\.behaviourLogp/);
    expect(() => mismatchStats([{ logp: f64([Number.NaN]), behaviourLogp: f64([-1]) }])).toThrow(/pairs\[0\]\.logp\[0\]/);
  });
});

describe('input validation', () => {
  const cfg = lossConfig();
  const ok = (): LossSample => ({ logp: f64([-1, -2]), behaviourLogp: f64([-1, -2]), advantage: 1 });
  const cases: [string, (s: LossSample) => LossSample, RegExp][] = [
    ['lengths disagree', (s) => ({ ...s, behaviourLogp: f64([-1]) }), /samples\[1\]\.behaviourLogp: has 1 entries for 2/],
    ['NaN logp', (s) => ({ ...s, logp: f64([-1, Number.NaN]) }), /samples\[1\]\.logp\[1\]/],
    ['infinite behaviour logp', (s) => ({ ...s, behaviourLogp: f64([-Infinity, -1]) }), /samples\[1\]\.behaviourLogp\[0\]/],
    ['NaN advantage', (s) => ({ ...s, advantage: Number.NaN }), /samples\[1\]\.advantage/],
    ['infinite per-token advantage', (s) => ({ ...s, advantage: f64([1, Infinity]) }), /samples\[1\]\.advantage\[1\]/],
    ['advantage length', (s) => ({ ...s, advantage: f64([1]) }), /samples\[1\]\.advantage/],
    ['negative weight', (s) => ({ ...s, weight: -1 }), /samples\[1\]\.weight/],
    ['weight length', (s) => ({ ...s, weight: f64([1, 1, 1]) }), /samples\[1\]\.weight/],
    ['versions length', (s) => ({ ...s, versions: Uint32Array.from([1]) }), /samples\[1\]\.versions/],
    ['plain array logp', (s) => ({ ...s, logp: [-1, -2] as unknown as Float64Array }), /samples\[1\]\.logp/],
  ];
  for (const [name, mutate, re] of cases)
    it(name, () => {
      expect(() => computeLoss([ok(), mutate(ok())], cfg)).toThrow(LossInputError);
      expect(() => computeLoss([ok(), mutate(ok())], cfg)).toThrow(re);
    });

  it('empty batches, entropy and detached shapes, and a hand-built bad config', () => {
    expect(() => computeLoss([], cfg)).toThrow(/samples/);
    expect(() => computeLoss([ok()], cfg, { entropy: [] })).toThrow(/entropy/);
    expect(() => computeLoss([ok()], cfg, { detachedLogp: [f64([-1])] })).toThrow(/detachedLogp\[0\]/);
    expect(() => computeLoss([ok()], { ...cfg, epsHigh: -1 })).toThrow(LossConfigError);
  });

  it('a fully masked batch gives loss 0, zero gradients and no NaN', () => {
    const r = computeLoss([{ ...ok(), weight: 0 }], cfg);
    expect(r.loss).toBe(0);
    expectArrayClose(r.dLdlogp[0], [0, 0]);
    expect(r.stats.tokens).toBe(0);
    expect(r.stats.health.ok).toBe(true);
  });

  it('Float32 inputs give the same result as Float64', () => {
    const s64 = ratioSample(1);
    const s32: LossSample = { ...s64, logp: Float32Array.from(s64.logp), behaviourLogp: Float32Array.from(s64.behaviourLogp) };
    const a = computeLoss([s64], cfg);
    const b = computeLoss([s32], cfg);
    expect(b.loss).toBeCloseTo(a.loss, 5);
    expectArrayClose(b.dLdlogp[0], Array.from(a.dLdlogp[0]), 5);
  });
});

// ---------------------------------------------------------------------------------------------
// Finite differences: ∂loss/∂logp for every loss kind (and its corrections) under every aggregation.
// Quantities under a stop-gradient are held fixed through detachedLogp, as autograd would.

const KIND_CONFIGS: [string, Partial<LossConfig>, { prox?: boolean; versions?: boolean; ref?: boolean }][] = [
  ['cispo', { kind: 'cispo' }, {}],
  ['cispo + KL to the reference', { kind: 'cispo', klCoef: 0.3 }, { ref: true }],
  ['ppo + KL to the reference', { kind: 'ppo', klCoef: 0.05 }, { ref: true }],
  ['cispo + lower bound + geoMask', { kind: 'cispo', epsLow: 0.2, epsHigh: 0.25, correction: { geoMask: { low: 0.9, high: 1.1 } } }, {}],
  ['cispo + token mask', { kind: 'cispo', cispoMask: { epsLow: 0.2, epsHigh: 0.28 } }, {}],
  ['ppo', { kind: 'ppo' }, {}],
  ['ppo + prox anchor + tokenTis', { kind: 'ppo', correction: { tokenTis: { cap: 1.1 } } }, { prox: true }],
  ['ppo + seqTis', { kind: 'ppo', correction: { seqTis: { cap: 1.2 } } }, { prox: true }],
  ['decoupled_ppo recomputed + tokenTis', { kind: 'decoupled_ppo', correction: { tokenTis: { cap: 1.1 } } }, { prox: true }],
  ['decoupled_ppo interpolated', { kind: 'decoupled_ppo', prox: { mode: 'interpolated', currentVersion: 7 } }, { versions: true }],
  ['reinforce_tis token', { kind: 'reinforce_tis', correction: { tokenTis: { cap: 1.1 } } }, {}],
  ['reinforce_tis sequence', { kind: 'reinforce_tis', correction: { seqTis: { cap: 1.3 } } }, {}],
  ['ppo + dual-clip', { kind: 'ppo', dualClip: 1.4 }, {}],
];

/** Random samples whose ratios stay at least `margin` away from every clip edge (so ±h never crosses a kink). */
function randomBatch(seed: number, opts: { prox?: boolean; versions?: boolean; ref?: boolean }): LossSample[] {
  const rnd = seededRandom(seed);
  const edges = [0.8, 1.28, 1.25, 1.2, 1.1, 1.3, 0.9, 1.4];
  const farFromEdges = (lr: number) => edges.every((e) => Math.abs(Math.exp(lr) - e) > 0.02);
  const pick = () => {
    for (;;) {
      const lr = (rnd() - 0.5) * 0.8;
      if (farFromEdges(lr)) return lr;
    }
  };
  const out: LossSample[] = [];
  for (let i = 0; i < 5; i++) {
    const L = 2 + Math.floor(rnd() * 4);
    const b = Float64Array.from({ length: L }, () => -0.2 - rnd() * 3);
    const prox = Float64Array.from(b, (x) => x + pick());
    const anchor = opts.prox ? prox : b;
    const logp = Float64Array.from(anchor, (x) => x + pick());
    const s: LossSample = {
      logp,
      behaviourLogp: b,
      advantage: i % 2 === 0 ? (rnd() - 0.5) * 4 : Float64Array.from({ length: L }, () => (rnd() - 0.5) * 4),
      weight: Float64Array.from({ length: L }, (_, t) => (t === 1 && i === 2 ? 0 : 0.5 + rnd())),
      trajectoryId: `T${i % 3}`,
      groupId: `g${i % 2}`,
    };
    if (opts.prox) s.proxLogp = prox;
    if (opts.versions) s.versions = Uint32Array.from({ length: L }, () => Math.floor(rnd() * 8));
    if (opts.ref) s.refLogp = Float64Array.from(logp, (x) => x + (rnd() - 0.5) * 9); // some tokens beyond the KL cap (log ρ > 3)
    out.push(s);
  }
  return out;
}

describe('finite-difference check of dLoss/dlogp: every kind × every aggregation', () => {
  const aggregations: Aggregation[] = ['token_mean', 'trajectory', 'group', 'seq_mean_token_mean', 'constant'];
  KIND_CONFIGS.forEach(([name, partial, shape], k) => {
    for (const aggregation of aggregations)
      it(`${name} / ${aggregation}`, () => {
        const cfg = lossConfig({ ...partial, aggregation, ...(aggregation === 'constant' ? { constantNormalizer: 13 } : {}) });
        const samples = randomBatch(1000 + k * 17, shape);
        const detachedLogp = samples.map((s) => Float64Array.from(s.logp));
        const base = computeLoss(samples, cfg, { detachedLogp });
        const h = 1e-6;
        let checked = 0;
        let nonZero = 0;
        samples.forEach((s, i) => {
          for (let t = 0; t < s.logp.length; t++) {
            const orig = s.logp[t];
            s.logp[t] = orig + h;
            const up = computeLoss(samples, cfg, { detachedLogp }).loss;
            s.logp[t] = orig - h;
            const down = computeLoss(samples, cfg, { detachedLogp }).loss;
            s.logp[t] = orig;
            const fd = (up - down) / (2 * h);
            expect(Math.abs(fd - base.dLdlogp[i][t])).toBeLessThan(1e-5 * Math.max(1, Math.abs(fd)));
            checked++;
            if (Math.abs(base.dLdlogp[i][t]) > 1e-6) nonZero++;
          }
        });
        expect(checked).toBeGreaterThan(10);
        expect(nonZero).toBeGreaterThan(checked / 3); // the check is not passing on an all-zero gradient
      });
  });

  it('PPO without corrections has no stop-gradient: the gradient matches FD of the plain function too', () => {
    const samples = randomBatch(77, {});
    const cfg = lossConfig({ kind: 'ppo' });
    const base = computeLoss(samples, cfg);
    const h = 1e-6;
    samples.forEach((s, i) => {
      for (let t = 0; t < s.logp.length; t++) {
        const orig = s.logp[t];
        s.logp[t] = orig + h;
        const up = computeLoss(samples, cfg).loss;
        s.logp[t] = orig - h;
        const down = computeLoss(samples, cfg).loss;
        s.logp[t] = orig;
        expect(Math.abs((up - down) / (2 * h) - base.dLdlogp[i][t])).toBeLessThan(1e-5);
      }
    });
  });
});
