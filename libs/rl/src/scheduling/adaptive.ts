// Adaptive window for the Windowed FIFO. No published system adapts W (Forge fixes W = 0.3N and
// calls the right W an open question; TitanRL later defaults to greedy). Anvil's rule keeps a BASE
// window W_b that is taken without question, and widens past it only while the trainer waits — at
// once when the batch the wider window gives has the population's difficulty mix, otherwise step by
// step as the wait grows. Why this shape (measured by `npm run bench -- scheduler`): what width costs
// is the batches it lets through while the trainer waits (whatever finishes first: easy tasks), and
// what it buys is the wait it ends. Widening the base whenever the trainer waited (this rule's first
// version) made W wide for every batch, also where the trainer waits at any W, and paid the skew for
// little idle; checking each widened batch pays skew only where a batch is actually skewed.
//
// Inputs
//   difficulty  per entry: its `difficulty` attribute, or, when it has none, its measured
//               completion time log(1 + completedAt - submittedAt). Population statistics: mean
//               and variance exponentially weighted over `populationMemory` entries (every
//               submitted entry for the attribute; every completed one for completion time).
//   wait        trainerWaited(ms) calls since the previous take (the trainer reports as it waits).
// Per take (WindowedFifo.take):
//   1. W_b fills a batch: take it.
//   2. Else the trainer is waiting. Mix gate: let W* be the narrowest window (<= max) that fills a
//      batch; if that batch's mean difficulty is within mixGate standard errors (population sd /
//      sqrt(batch size)) of the population mean, widen to W* and take it at once.
//   3. Else patience: each time the wait since the last take grows by `patience` x the usual step
//      interval (EW mean of the time between takes), W widens one notch from W_b (x widenFactor, at
//      least +1, up to max) and takes whatever that window fills — so a straggler at the head, or a
//      run of skewed batches, holds the trainer back for a bounded time at most (after that it
//      waits only for work that has not finished). The next take resets W to W_b.
// Per step (after each non-empty take), on W_b, from the batches actually taken:
//   z = (batch mean difficulty - population mean) / population sd, n = batch size;
//   drift      = EW mean of z       (half-life driftHalfLife batches): a biased mix;
//   dispersion = EW mean of n z^2   (same half-life): 1 when batches are random samples of the
//                population, larger when their mix swings more than sampling explains.
//   narrow  if |drift| > driftTolerance or dispersion > 1 + dispersionTolerance:
//             W_b <- max(min, W_b - max(1, W_b (1 - narrowFactor)))
//   recover else after relaxAfter such calm steps in a row, W_b moves one toward `initial`.
// Bounds: min <= W_b <= max and min <= W <= max at all times, W an integer; W_b stays in
// [min, initial] unless restored outside it. Defaults min = max(1, round(0.1 N)), initial =
// round(0.2 N), max = N. The worst-case lag is that of W = max (N + max - 2 positions).
// Every knob is validated (typed errors naming adaptive.<knob>).
import { requireFinite, requireInt, SchedulingError } from './errors';

export interface AdaptiveWindowConfig {
  /** Smallest base window (>= 1). Default max(1, round(0.1 N)). */
  min: number;
  /** Largest window, reached only while the trainer waits (<= N). Default N. */
  max: number;
  /** Base window at start, and the one it recovers to when the mix is calm. Default round(0.2 N) clamped to [min, max]. */
  initial: number;
  /** Mix gate, in standard errors of a batch mean (population sd / sqrt(batch size)); 0 = never widen at once. Default 1. */
  mixGate: number;
  /** Within one wait: each time the trainer has waited this share of the usual step interval, W widens one more notch (0 = off). Default 0.25. */
  patience: number;
  /** Multiplicative widening per patience notch (> 1; at least +1). Default 1.5. */
  widenFactor: number;
  /** Multiplicative narrowing of the base (in (0, 1); at least -1 per step). Default 0.5. */
  narrowFactor: number;
  /** |drift| (in population standard deviations) above which the base narrows. Default 0.15. */
  driftTolerance: number;
  /** Half-life of the drift and dispersion averages, in batches. Default 32. */
  driftHalfLife: number;
  /**
   * Excess dispersion above which the base narrows: the average of n z^2 over recent batches (n = batch size)
   * is 1 when batches are random samples of the population; narrow when it exceeds 1 + this. Default 0.25: with random
   * batches its exponentially weighted average has sd sqrt(2a / (2 - a)) ≈ 0.15 at half-life 32 (a = 1 - 0.5^(1/32)), so
   * noise alone rarely narrows.
   */
  dispersionTolerance: number;
  /** Calm steps in a row after which the base moves one toward `initial`. Default 3 (0 = never). */
  relaxAfter: number;
  /** Memory of the population statistics, in entries. Default 20 N. */
  populationMemory: number;
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
  const initial = input.initial ?? Math.min(max, Math.max(min, Math.round(0.2 * N)));
  requireInt(f('initial'), initial, min, max, 'invalid_config');
  const cfg: AdaptiveWindowConfig = {
    min,
    max,
    initial,
    mixGate: input.mixGate ?? 1,
    patience: input.patience ?? 0.25,
    widenFactor: input.widenFactor ?? 1.5,
    narrowFactor: input.narrowFactor ?? 0.5,
    driftTolerance: input.driftTolerance ?? 0.15,
    driftHalfLife: input.driftHalfLife ?? 32,
    dispersionTolerance: input.dispersionTolerance ?? 0.25,
    relaxAfter: input.relaxAfter ?? 3,
    populationMemory: input.populationMemory ?? 20 * N,
  };
  requireFinite(f('mixGate'), cfg.mixGate, 0, 'invalid_config');
  requireFinite(f('patience'), cfg.patience, 0, 'invalid_config');
  requireFinite(f('widenFactor'), cfg.widenFactor, 1, 'invalid_config');
  if (cfg.widenFactor <= 1) throw new SchedulingError('invalid_config', f('widenFactor'), `must be > 1, got ${cfg.widenFactor}`);
  requireFinite(f('narrowFactor'), cfg.narrowFactor, 0, 'invalid_config');
  if (cfg.narrowFactor <= 0 || cfg.narrowFactor >= 1)
    throw new SchedulingError('invalid_config', f('narrowFactor'), `must be in (0, 1), got ${cfg.narrowFactor}`);
  requireFinite(f('driftTolerance'), cfg.driftTolerance, 0, 'invalid_config');
  requireFinite(f('driftHalfLife'), cfg.driftHalfLife, 0, 'invalid_config');
  if (cfg.driftHalfLife <= 0) throw new SchedulingError('invalid_config', f('driftHalfLife'), `must be > 0, got ${cfg.driftHalfLife}`);
  requireFinite(f('dispersionTolerance'), cfg.dispersionTolerance, 0, 'invalid_config');
  requireInt(f('relaxAfter'), cfg.relaxAfter, 0, Number.MAX_SAFE_INTEGER, 'invalid_config');
  requireFinite(f('populationMemory'), cfg.populationMemory, 1, 'invalid_config');
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
      : {
          w: cfg.initial,
          drift: 0,
          dispersion: 1,
          popMean: 0,
          popVar: 0,
          popCount: 0,
          calmSteps: 0,
          waitedMs: 0,
          lastStepAt: null,
          base: cfg.initial,
          interval: 0,
        };
  }

  get window(): number {
    return Math.round(this.s.w);
  }

  /** The base window (taken without a mix check). */
  get base(): number {
    return this.s.base;
  }

  get drift(): number {
    return this.s.drift;
  }

  get dispersion(): number {
    return this.s.dispersion;
  }

  /** One population observation (a submitted entry's difficulty, or a completion time). */
  observe(x: number): void {
    requireFinite('difficulty', x);
    const s = this.s;
    s.popCount++;
    // exponentially weighted mean/variance; plain running mean while fewer than 1/alpha samples
    const a = Math.max(this.popAlpha, 1 / s.popCount);
    const d = x - s.popMean;
    s.popMean += a * d;
    s.popVar = (1 - a) * (s.popVar + a * d * d);
  }

  waited(ms: number): void {
    requireFinite('ms', ms, 0);
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

  /**
   * The mix gate: may the window widen now to take a batch with these difficulties (one per entry)? Yes when the
   * batch's mean lies within mixGate standard errors of the population mean; no while the population is unknown.
   */
  admitsWider(difficulties: number[]): boolean {
    requireDifficulties(difficulties);
    const s = this.s;
    const n = difficulties.length;
    const sd = Math.sqrt(s.popVar);
    if (this.cfg.mixGate === 0 || n === 0 || s.popCount < 2 || !(sd > 0)) return false;
    const mean = difficulties.reduce((a, b) => a + b, 0) / n;
    return Math.abs(mean - s.popMean) <= (this.cfg.mixGate * sd) / Math.sqrt(n);
  }

  /** The window used for the take at hand (the next step() goes back to the base). */
  widenTo(w: number): void {
    requireInt('w', w, 1);
    this.s.w = Math.max(this.s.w, Math.min(this.cfg.max, Math.round(w)));
  }

  /**
   * A batch was taken at `now` with these difficulties (empty: no difficulty known). Returns the new base window. A
   * `now` at or before the previous step (clocks of two processes after a restore) measures no step interval.
   */
  step(now: number, difficulties: number[]): number {
    requireFinite('now', now);
    requireDifficulties(difficulties);
    const s = this.s;
    const c = this.cfg;
    const interval = s.lastStepAt === null ? 0 : now - s.lastStepAt;
    s.waitedMs = 0;
    s.lastStepAt = now;
    if (interval > 0) s.interval = s.interval === 0 ? interval : s.interval + 0.2 * (interval - s.interval);
    const sd = Math.sqrt(s.popVar);
    if (difficulties.length > 0 && s.popCount >= 2 && sd > 0) {
      const mean = difficulties.reduce((a, b) => a + b, 0) / difficulties.length;
      const z = (mean - s.popMean) / sd;
      s.drift += this.driftAlpha * (z - s.drift);
      s.dispersion += this.driftAlpha * (difficulties.length * z * z - s.dispersion);
    }
    let base = s.base;
    if (Math.abs(s.drift) > c.driftTolerance || s.dispersion > 1 + c.dispersionTolerance) {
      base = Math.max(c.min, base - Math.max(1, base * (1 - c.narrowFactor)));
      s.calmSteps = 0;
    } else {
      s.calmSteps++;
      if (c.relaxAfter > 0 && s.calmSteps >= c.relaxAfter && base !== c.initial) {
        base += base < c.initial ? 1 : -1;
        s.calmSteps = 0;
      }
    }
    s.base = Math.round(base);
    s.w = s.base;
    return s.w;
  }

  snapshot(): AdaptiveWindowState {
    return { ...this.s };
  }
}

function requireDifficulties(ds: unknown): asserts ds is number[] {
  if (!Array.isArray(ds)) throw new SchedulingError('invalid_argument', 'difficulties', 'must be an array of numbers');
  ds.forEach((d, i) => requireFinite(`difficulties[${i}]`, d));
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
