import { seededRandom } from '@anvil/rl';

/**
 * Tool execution time as part of the environment: a heavy-tailed delay per tool call, so
 * benchmarks reproduce agent workloads whose durations spread from seconds to minutes.
 *
 * - none: 0 ms (the main job's default).
 * - pareto: scaleMs · U^(−1/alpha) (alpha ≤ 2: infinite variance; alpha ≤ 1: infinite mean), capped.
 * - lognormal: medianMs · exp(sigma · N(0,1)), capped.
 */
export type ToolDelay =
  | { kind: 'none' }
  | { kind: 'fixed'; ms: number }
  | { kind: 'pareto'; scaleMs: number; alpha: number; capMs: number }
  | { kind: 'lognormal'; medianMs: number; sigma: number; capMs: number };

export class ToolDelayError extends Error {
  override readonly name = 'ToolDelayError';
}

export function validateToolDelay(d: ToolDelay): ToolDelay {
  const bad = (field: string, why: string) => {
    throw new ToolDelayError(`toolDelay.${field}: ${why}`);
  };
  const pos = (field: string, v: unknown, allowZero = false) => {
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || (!allowZero && v === 0))
      bad(field, `must be a ${allowZero ? 'non-negative' : 'positive'} number, got ${String(v)}`);
  };
  switch (d?.kind) {
    case 'none':
      return d;
    case 'fixed':
      pos('ms', d.ms, true);
      return d;
    case 'pareto':
      pos('scaleMs', d.scaleMs);
      pos('alpha', d.alpha);
      pos('capMs', d.capMs);
      return d;
    case 'lognormal':
      pos('medianMs', d.medianMs);
      pos('sigma', d.sigma, true);
      pos('capMs', d.capMs);
      return d;
    default:
      return bad('kind', `must be none | fixed | pareto | lognormal, got ${JSON.stringify((d as { kind?: unknown })?.kind)}`);
  }
}

/** A delay sampler for one episode (deterministic in its seed). */
export function delaySampler(d: ToolDelay, seed: number): () => number {
  const rand = seededRandom(seed);
  switch (d.kind) {
    case 'none':
      return () => 0;
    case 'fixed':
      return () => d.ms;
    case 'pareto':
      return () => Math.min(d.capMs, d.scaleMs * Math.pow(1 - rand(), -1 / d.alpha));
    case 'lognormal':
      return () => {
        // Box–Muller
        const u = 1 - rand();
        const v = rand();
        const z = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
        return Math.min(d.capMs, d.medianMs * Math.exp(d.sigma * z));
      };
  }
}

/** Sleeps ms (0 resolves at once), rejecting with the signal's reason when aborted. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (ms <= 0) return Promise.resolve();
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason ?? new Error('aborted'));
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason ?? new Error('aborted'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
