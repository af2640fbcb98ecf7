import type { RolloutFinishReason } from '@anvil/contracts';
import { filterGroup, type FilterConfig, type FilterResult, type FilterRollout } from '@anvil/rl';
import { RETRIED, type GroupWave } from './group-wave';

/** What libs/rl's filters decided for this wave (null: no fresh member reached them), and the fresh rollouts to retry. */
export interface FilterOutcome {
  result: FilterResult | null;
  retry: string[];
  /** This wave's members that train (weight 0 = kept for statistics only); empty when the group is dropped. */
  publish: [string, number][];
}

/**
 * Applies libs/rl's filters to the group: marks on the wave what they drop (environment failures
 * sent back for retry or exhausted, other failures, the whole group) and returns what trains.
 */
export function filterWave(wave: GroupWave, f: FilterConfig): FilterOutcome {
  const input = filterInputOf(wave, f);
  const result = input.some((x) => wave.freshIds.has(x.rolloutId)) ? filterGroup(input, f) : null;
  const retry = (result?.retry ?? []).filter((id) => wave.freshIds.has(id));
  if (result) {
    for (const id of result.dropped) {
      if (!wave.freshIds.has(id)) continue;
      const r = wave.rowOf(id);
      const a = wave.attemptOf(r);
      if (!f.envErrorReasons.includes(r.finish_reason as string)) wave.drop(r, `dropped: ${String(r.finish_reason)}`);
      else if (retry.includes(id)) wave.drop(r, `${RETRIED}: ${String(r.finish_reason)} on attempt ${a} of at most ${1 + f.maxEnvRetries}`);
      else wave.drop(r, `env_failure_exhausted: ${String(r.finish_reason)} on attempt ${a} (maxEnvRetries ${f.maxEnvRetries})`);
    }
    if (result.decision === 'drop')
      for (const id of result.lossWeights.keys()) if (wave.freshIds.has(id)) wave.drop(wave.rowOf(id), `group_dropped: ${result.reason}`);
  }
  const publish = result && result.decision === 'keep' ? [...result.lossWeights.entries()].filter(([id]) => wave.freshIds.has(id)) : [];
  return { result, retry, publish };
}

/**
 * The filters' input: this wave's completed members (one without a reward or without calls is
 * dropped here instead), and the members settled in an earlier wave whose reward counted then
 * (published, or dropped with their group).
 */
function filterInputOf(wave: GroupWave, f: FilterConfig): FilterRollout[] {
  const input: FilterRollout[] = [];
  for (const id of wave.members) {
    const r = wave.rowOf(id);
    if (!r.settled) {
      if (wave.fates.get(id)?.fate !== 'done') continue;
      const reason = r.finish_reason as RolloutFinishReason;
      const failed = f.envErrorReasons.includes(reason) || f.dropReasons.includes(reason);
      if (!failed && r.outcome_reward === null) wave.drop(r, `no_reward: ${reason}`);
      else if (!failed && Number(r.calls) === 0) wave.drop(r, 'no_calls');
      else
        input.push({
          rolloutId: id,
          finishReason: reason,
          reward: failed ? null : Number(r.outcome_reward),
          outputTruncated: Number(r.truncated_calls) > 0,
          attempts: wave.attemptOf(r),
        });
      continue;
    }
    const scored =
      r.q_status === 'completed' || r.q_status === 'taken' || (r.q_status === 'dropped' && r.q_reason?.startsWith('group_dropped:'));
    if (scored && r.finish_reason !== null && r.outcome_reward !== null)
      input.push({
        rolloutId: id,
        finishReason: r.finish_reason,
        reward: Number(r.outcome_reward),
        outputTruncated: Number(r.truncated_calls) > 0 || r.loss_masked === true,
      });
  }
  return input;
}
