// Adaptive window for the Windowed FIFO. No published system adapts W (Forge fixes W = 0.3N and
// calls the right W an open question; TitanRL later defaults to greedy). Anvil's rule has two
// time scales: a BASE window adapted once per train step (each non-empty take), and a temporary
// widening while the trainer is waiting.
//
// Inputs
//   wait        trainerWaited(ms) calls since the previous take; idle = their sum / time between
//               the two takes.
//   difficulty  per entry: its `difficulty` attribute, or, when it has none, its measured
//               completion time log(1 + completedAt - submittedAt). Population statistics: mean
//               and variance exponentially weighted over `populationMemory` entries (every
//               submitted entry for the attribute; every completed one for completion time).
//   per batch   z = (mean difficulty of the batch - population mean) / population sd, n = size;
//               drift      = EW mean of z       (half-life driftHalfLife batches): a biased mix;
//               dispersion = EW mean of n z^2   (same half-life): 1 when batches are random samples
//                            of the population, larger when their mix swings more than sampling
//                            explains (greedy batches of whatever finished first).
// Per step (take), on the base window W_b:
//   narrow  if |drift| > driftTolerance or dispersion > 1 + dispersionTolerance:
//             W_b <- max(min, W_b - max(1, W_b (1 - narrowFactor)))
//   widen   else if idle > idleTolerance:  W_b <- min(max, W_b + max(1, W_b (widenFactor - 1)))
//   relax   else after relaxAfter steps in a row with neither: W_b <- max(min, W_b - 1)
//           (the width is not buying anything: give it back, staleness and skew stay low)
//   and the window used next is W_b.
// While waiting: each time the wait since the last take grows by `patience` x the usual step
//   interval (EW mean of the time between takes), W widens by one more notch (x widenFactor, at
//   least +1) from W_b, up to max; the next take resets it to W_b. Short waits (the next in-order
//   entry is about to finish) keep the order; a long one (a straggler at the head) opens the
//   window, which is where width buys the most idle time for the least reordering.
// Narrowing wins over widening: the difficulty mix is a correctness concern (the gradient estimates
// a different population), idle time only a cost.
// Bounds: min <= W <= max at all times, W an integer; defaults min = max(1, round(0.1 N)),
// max = N, start round(0.3 N). The worst-case lag is that of W = max (N + max - 2 positions).
// Every knob is validated (typed errors naming adaptive.<knob>).
import { requireFinite, requireInt, SchedulingError } from './errors';

export interface AdaptiveWindowConfig {
  /** Smallest window (>= 1). Default max(1, round(0.1 N)). */
  min: number;
  /** Largest window (<= N). Default N. */
  max: number;
  /** Window at start. Default round(0.3 N) clamped to [min, max]. */
  initial: number;
  /** Trainer wait share of a step above which the window widens. Default 0.02. */
  idleTolerance: number;
  /** Multiplicative widening (> 1; at least +1 per step). Default 1.5. */
  widenFactor: number;
  /** Multiplicative narrowing (in (0, 1); at least -1 per step). Default 0.5. */
  narrowFactor: number;
  /** |drift| (in population standard deviations) above which the window narrows. Default 0.15. */
  driftTolerance: number;
  /** Half-life of the drift and dispersion averages, in batches. Default 32. */
  driftHalfLife: number;
  /**
   * Excess dispersion above which the window narrows: the average of n z^2 over recent batches (n = batch size)
   * is 1 when batches are random samples of the population; narrow when it exceeds 1 + this. Default 0.25: with random
   * batches its exponentially weighted average has sd sqrt(2a / (2 - a)) ≈ 0.15 at half-life 32 (a = 1 - 0.5^(1/32)), so
   * noise alone rarely narrows.
   */
  dispersionTolerance: number;
  /** Steps without any trainer wait after which W shrinks by one. Default 3 (0 = never). */
  relaxAfter: number;
  /** Memory of the population statistics, in entries. Default 20 N. */
  populationMemory: number;
  /** Within one wait: each time the trainer has waited this share of the usual step interval, W widens once more (0 = off). Default 0.1. */
  patience: number;
}

export interface AdaptiveWindowState {
  w: number;
  drift: number;
  dispersion: number;
  popMean: number;
  popVar: number;
  popCount: number;
  calmSteps: number;
  waitedMs: number;
  lastStepAt: number | null;
  /** Base window between waits (the current one is wider while the trainer waits). */
  base: number;
  interval: number;
}

export function adaptiveWindowConfig(inFlight: number, input: Partial<AdaptiveWindowConfig> = {}): AdaptiveWindowConfig {
  const N = inFlight;
  const f = (k: keyof AdaptiveWindowConfig) => `adaptive.${k}`;
  const min = input.min ?? Math.max(1, Math.round(0.1 * N));
  const max = input.max ?? N;
  requireInt(f('min'), min, 1, N, 'invalid_config');
  requireInt(f('max'), max, 1, N, 'invalid_config');
  if (min > max) throw new SchedulingError('invalid_config', f('min'), `must be <= adaptive.max (${max}), got ${min}`);
  const initial = input.initial ?? Math.min(max, Math.max(min, Math.round(0.3 * N)));
  requireInt(f('initial'), initial, min, max, 'invalid_config');
  const cfg: AdaptiveWindowConfig = {
    min,
    max,
    initial,
    idleTolerance: input.idleTolerance ?? 0.02,
    widenFactor: input.widenFactor ?? 1.5,
    narrowFactor: input.narrowFactor ?? 0.5,
    driftTolerance: input.driftTolerance ?? 0.15,
    driftHalfLife: input.driftHalfLife ?? 32,
    dispersionTolerance: input.dispersionTolerance ?? 0.25,
    relaxAfter: input.relaxAfter ?? 3,
    populationMemory: input.populationMemory ?? 20 * N,
    patience: input.patience ?? 0.1,
  };
  requireFinite(f('idleTolerance'), cfg.idleTolerance, 0, 'invalid_config');
  if (cfg.idleTolerance >= 1) throw new SchedulingError('invalid_config', f('idleTolerance'), `must be < 1, got ${cfg.idleTolerance}`);
  requireFinite(f('widenFactor'), cfg.widenFactor, 1, 'invalid_config');
  requireFinite(f('narrowFactor'), cfg.narrowFactor, 0, 'invalid_config');
  if (cfg.narrowFactor <= 0 || cfg.narrowFactor >= 1) throw new SchedulingError('invalid_config', f('narrowFactor'), `must be in (0, 1), got ${cfg.narrowFactor}`);
  requireFinite(f('driftTolerance'), cfg.driftTolerance, 0, 'invalid_config');
  requireFinite(f('driftHalfLife'), cfg.driftHalfLife, 0, 'invalid_config');
  if (cfg.driftHalfLife <= 0) throw new SchedulingError('invalid_config', f('driftHalfLife'), `must be > 0, got ${cfg.driftHalfLife}`);
  requireFinite(f('dispersionTolerance'), cfg.dispersionTolerance, 0, 'invalid_config');
  requireInt(f('relaxAfter'), cfg.relaxAfter, 0, Number.MAX_SAFE_INTEGER, 'invalid_config');
  requireFinite(f('populationMemory'), cfg.populationMemory, 1, 'invalid_config');
  requireFinite(f('patience'), cfg.patience, 0, 'invalid_config');
  return cfg;
}

/** The adaptive-W controller (pure state machine); WindowedFifo feeds it. */
export class AdaptiveWindow {
  private s: AdaptiveWindowState;
  private readonly driftAlpha: number;
  private readonly popAlpha: number;

  constructor(
    readonly cfg: AdaptiveWindowConfig,
    state?: AdaptiveWindowState,
  ) {
    this.driftAlpha = 1 - Math.pow(0.5, 1 / cfg.driftHalfLife);
    this.popAlpha = 1 / cfg.populationMemory;
    this.s = state
      ? validateState(cfg, state)
      : { w: cfg.initial, drift: 0, dispersion: 1, popMean: 0, popVar: 0, popCount: 0, calmSteps: 0, waitedMs: 0, lastStepAt: null, base: cfg.initial, interval: 0 };
  }

  get window(): number {
    return Math.round(this.s.w);
  }

  get drift(): number {
    return this.s.drift;
  }

  get dispersion(): number {
    return this.s.dispersion;
  }

  /** One population observation (a submitted entry's difficulty, or a completion time). */
  observe(x: number): void {
    const s = this.s;
    s.popCount++;
    // exponentially weighted mean/variance; plain running mean while fewer than 1/alpha samples
    const a = Math.max(this.popAlpha, 1 / s.popCount);
    const d = x - s.popMean;
    s.popMean += a * d;
    s.popVar = (1 - a) * (s.popVar + a * d * d);
  }

  waited(ms: number): void {
    const s = this.s;
    const c = this.cfg;
    s.waitedMs += ms;
    if (c.patience > 0 && s.interval > 0) {
      const notches = Math.floor(s.waitedMs / (c.patience * s.interval));
      let w = s.base;
      for (let i = 0; i < notches && w < c.max; i++) w = Math.min(c.max, w + Math.max(1, w * (c.widenFactor - 1)));
      s.w = Math.max(s.w, Math.round(w));
    }
  }

  /** A batch was taken at `now` with these difficulties (empty: no difficulty known). Returns the new W. */
  step(now: number, difficulties: number[]): number {
    const s = this.s;
    const c = this.cfg;
    const interval = s.lastStepAt === null ? 0 : now - s.lastStepAt;
    const idle = interval > 0 ? Math.min(1, s.waitedMs / interval) : s.waitedMs > 0 ? 1 : 0;
    s.waitedMs = 0;
    s.lastStepAt = now;
    if (interval > 0) s.interval = s.interval === 0 ? interval : s.interval + 0.2 * (interval - s.interval);
    s.w = s.base;
    const sd = Math.sqrt(s.popVar);
    if (difficulties.length > 0 && s.popCount >= 2 && sd > 0) {
      const mean = difficulties.reduce((a, b) => a + b, 0) / difficulties.length;
      const z = (mean - s.popMean) / sd;
      s.drift += this.driftAlpha * (z - s.drift);
      s.dispersion += this.driftAlpha * (difficulties.length * z * z - s.dispersion);
    }
    if (Math.abs(s.drift) > c.driftTolerance || s.dispersion > 1 + c.dispersionTolerance) {
      s.w = Math.max(c.min, s.w - Math.max(1, s.w * (1 - c.narrowFactor)));
      s.calmSteps = 0;
    } else if (idle > c.idleTolerance) {
      s.w = Math.min(c.max, s.w + Math.max(1, s.w * (c.widenFactor - 1)));
      s.calmSteps = 0;
    } else {
      s.calmSteps++;
      if (c.relaxAfter > 0 && s.calmSteps >= c.relaxAfter) {
        s.w = Math.max(c.min, s.w - 1);
        s.calmSteps = 0;
      }
    }
    s.w = Math.round(s.w);
    s.base = s.w;
    return s.w;
  }

  snapshot(): AdaptiveWindowState {
    return { ...this.s };
  }
}

function validateState(cfg: AdaptiveWindowConfig, s: AdaptiveWindowState): AdaptiveWindowState {
  if (!s || typeof s !== 'object') throw new SchedulingError('invalid_state', 'adaptive', 'must be an object');
  requireInt('adaptive.w', s.w, cfg.min, cfg.max, 'invalid_state');
  requireFinite('adaptive.drift', s.drift, -Infinity, 'invalid_state');
  requireFinite('adaptive.dispersion', s.dispersion, 0, 'invalid_state');
  requireFinite('adaptive.popMean', s.popMean, -Infinity, 'invalid_state');
  requireFinite('adaptive.popVar', s.popVar, 0, 'invalid_state');
  requireInt('adaptive.popCount', s.popCount, 0, Number.MAX_SAFE_INTEGER, 'invalid_state');
  requireInt('adaptive.calmSteps', s.calmSteps, 0, Number.MAX_SAFE_INTEGER, 'invalid_state');
  requireFinite('adaptive.waitedMs', s.waitedMs, 0, 'invalid_state');
  if (s.lastStepAt !== null) requireFinite('adaptive.lastStepAt', s.lastStepAt, -Infinity, 'invalid_state');
  requireInt('adaptive.base', s.base, cfg.min, cfg.max, 'invalid_state');
  requireFinite('adaptive.interval', s.interval, 0, 'invalid_state');
  return { ...s };
}
