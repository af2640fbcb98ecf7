import { computeGroupAdvantages, type AdvantageConfig, type FilterResult, type RolloutScore } from '@anvil/rl';
import type { Db } from '../sql';
import type { GroupWave } from './group-wave';

export interface GroupAdvantages {
  /** Per kept rollout: its advantage (0 when masked) and per-call advantages (process rewards), if any. */
  of: Map<string, { advantage: number; perCall: number[] | null }>;
  /** 1 − the kept rollouts' mean reward: the group's difficulty for the adaptive window. */
  difficulty: number | null;
}

interface AdvantageSettings {
  runId: string;
  advantage: AdvantageConfig;
  /** Trajectories per train batch: reinforce_pp's batch std spans about this many (absent: the group alone). */
  batchTrajectories?: number;
}

/** The advantages of a kept group's rollouts with the run's estimator (none when the group is dropped). */
export async function groupAdvantages(
  m: Db,
  wave: GroupWave,
  group: { taskId: string; groupSize: number },
  result: FilterResult | null,
  cfg: AdvantageSettings,
): Promise<GroupAdvantages> {
  if (!result || result.decision !== 'keep') return { of: new Map(), difficulty: null };
  const kept = [...result.lossWeights.entries()];
  const process = await processRewardsOf(
    m,
    kept.map(([id]) => id),
    cfg.advantage,
  );
  const scores: RolloutScore[] = kept.map(([id, w]) => {
    const p = process?.get(id);
    return {
      rolloutId: id,
      outcomeReward: Number(wave.rowOf(id).outcome_reward),
      masked: w === 0,
      ...(p ? { processRewards: p.values } : {}),
    };
  });
  const batchPeers = cfg.advantage.estimator === 'reinforce_pp' ? await batchPeersOf(m, wave.groupId, group.groupSize, cfg) : undefined;
  const adv = computeGroupAdvantages(group.taskId, scores, cfg.advantage, { batchPeers });
  return {
    of: new Map(
      kept.map(([id, w], i) => [
        id,
        { advantage: w === 0 ? 0 : (adv.perRollout[i] ?? 0), perCall: w !== 0 && adv.perCall ? adv.perCall[i] : null },
      ]),
    ),
    difficulty: 1 - kept.reduce((a, [id]) => a + Number(wave.rowOf(id).outcome_reward), 0) / kept.length,
  };
}

/**
 * The per-call process rewards of these rollouts, in each rollout's call order (the order of its
 * trajectory's call_ids), or null when the rule is off (processRewardWeight 0), some rollout
 * lacks a process reward for one of its calls, or a rollout's calls are gone (pruned after an
 * earlier wave trained): then every call takes its rollout's advantage.
 */
async function processRewardsOf(
  m: Db,
  rolloutIds: string[],
  advantage: AdvantageConfig,
): Promise<Map<string, { callIds: string[]; values: number[] }> | null> {
  if (!advantage.processRewardWeight) return null;
  const calls: { rollout_id: string; id: string }[] = await m.query(
    `SELECT "rollout_id", "id" FROM "llm_calls" WHERE "rollout_id" = ANY($1::varchar[]) ORDER BY "rollout_id", "turn_index", "received_at", "id"`,
    [rolloutIds],
  );
  const rewards: { call_id: string; value: number }[] = await m.query(
    `SELECT "call_id", "value" FROM "rewards" WHERE "kind" = 'process' AND "rollout_id" = ANY($1::varchar[])`,
    [rolloutIds],
  );
  const valueOf = new Map(rewards.map((r) => [r.call_id, Number(r.value)]));
  const out = new Map<string, { callIds: string[]; values: number[] }>(rolloutIds.map((id) => [id, { callIds: [], values: [] }]));
  for (const c of calls) {
    const v = valueOf.get(c.id);
    if (v === undefined) return null;
    const r = out.get(c.rollout_id);
    r?.callIds.push(c.id);
    r?.values.push(v);
  }
  for (const r of out.values()) if (r.callIds.length === 0) return null;
  return out;
}

/**
 * reinforce_pp's batch: groups settle one at a time, long before the scheduler cuts the batch
 * they will train in, so the batch std counts this group with the most recently opened groups
 * already ready when it settles (opening order is what the index serves, and it is close to
 * the batch order), enough of them to fill one batch of batchTrajectories: their trained
 * trajectories' rewards, each centred on its own group's mean.
 */
async function batchPeersOf(m: Db, groupId: string, groupSize: number, cfg: AdvantageSettings): Promise<number[]> {
  const peerGroups = Math.ceil((cfg.batchTrajectories ?? groupSize) / Math.max(1, groupSize)) - 1;
  if (peerGroups <= 0) return [];
  const rows: { c: number }[] = await m.query(
    `SELECT t."reward" - avg(t."reward") OVER (PARTITION BY t."group_id") AS c
     FROM "trajectories" t
     WHERE NOT t."loss_masked" AND t."group_id" IN (
       SELECT "group_id" FROM "data_pool_groups" WHERE "run_id" = $1 AND "status" = 'ready' AND "group_id" <> $2 ORDER BY "opened_at" DESC LIMIT $3)`,
    [cfg.runId, groupId, peerGroups],
  );
  return rows.map((r) => Number(r.c));
}
