import type { RolloutRow } from '../state-store';

/**
 * The seed of a rollout's sampler and environment. A train rollout's comes from its own id. An
 * evaluation rollout's comes from (task, sample index) alone, so every evaluation of a task set
 * draws the same random numbers for the same task and sample: two versions' success rates are a
 * paired comparison (common random numbers), and the run-to-run noise of an evaluation (±5 points
 * on 100 tasks at temperature 1) mostly cancels out of the gain between two of them. Each
 * evaluation on its own is still an unbiased draw of its policy at the sampling temperature.
 */
export function samplerSeed(purpose: 'train' | 'eval', taskId: string, r: Pick<RolloutRow, 'id' | 'sampleIndex'>): number {
  return hashSeed(purpose === 'eval' ? `eval:${taskId}:${r.sampleIndex}` : r.id);
}

function hashSeed(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}
