import { createEvent, type EventEnvelope, type RolloutFinishReason } from '@anvil/contracts';
import { msOf, type Db } from '../sql';
import type { GroupAdvantages } from './group-advantages';
import type { GroupWave } from './group-wave';

/** A trajectory row as the wave writes it (and its queue row's update): see writeTrajectories. */
export interface TrajectoryRow {
  id: string;
  call_ids: string[];
  finish_reason: RolloutFinishReason;
  reward: number;
  advantage: number;
  loss_masked: boolean;
  min_v: number;
  max_v: number;
  prompt_tokens: number;
  output_tokens: number;
  call_advantages: number[] | null;
  tokens: number;
  completed_ms: number;
}

export interface ReadyTrajectories {
  ids: string[];
  rows: TrajectoryRow[];
  events: EventEnvelope<'trajectory.ready'>[];
}

/** The trajectories this wave publishes: their rows and their trajectory.ready events. */
export async function readyTrajectories(
  m: Db,
  wave: GroupWave,
  group: { taskId: string },
  publish: [string, number][],
  advantages: GroupAdvantages,
  now: number,
  producer: string,
): Promise<ReadyTrajectories> {
  const callsOf = await publishedCallsOf(
    m,
    publish.map(([id]) => id),
  );
  const out: ReadyTrajectories = { ids: [], rows: [], events: [] };
  for (const [id, weight] of publish) {
    const row = wave.rowOf(id);
    const masked = weight === 0;
    const a = advantages.of.get(id);
    const c = callsOf.get(id);
    const minV = Number(c?.min_v ?? 0);
    const maxV = Number(c?.max_v ?? 0);
    const payload = {
      trajectoryId: id,
      rolloutId: id,
      groupId: wave.groupId,
      taskId: group.taskId,
      callIds: c?.call_ids ?? [],
      finishReason: row.finish_reason as RolloutFinishReason,
      reward: Number(row.outcome_reward),
      advantage: a?.advantage ?? 0,
      lossMasked: masked,
      minPolicyVersion: minV,
      maxPolicyVersion: maxV,
      promptTokens: Number(row.prompt_tokens ?? 0),
      outputTokens: Number(row.output_tokens ?? 0),
      readyAt: now,
    };
    // per-call advantages, aligned with call_ids (the order the process rewards were read in)
    const perCall = a?.perCall && a.perCall.length === payload.callIds.length ? a.perCall : null;
    out.rows.push({
      id,
      call_ids: payload.callIds,
      finish_reason: payload.finishReason,
      reward: payload.reward,
      advantage: payload.advantage,
      loss_masked: masked,
      min_v: minV,
      max_v: maxV,
      prompt_tokens: payload.promptTokens,
      output_tokens: payload.outputTokens,
      call_advantages: perCall,
      tokens: payload.promptTokens + payload.outputTokens,
      completed_ms: msOf(row.completed_ms) ?? now,
    });
    out.ids.push(id);
    out.events.push(createEvent('trajectory.ready', payload, { key: id, producer, id: `trajectory.ready:${id}` }));
  }
  return out;
}

/**
 * Each published rollout's calls in turn order and the policy versions of their outputs, in one
 * statement: a statement per member would cost a round trip each while the group's lock is held.
 */
async function publishedCallsOf(
  m: Db,
  rolloutIds: string[],
): Promise<Map<string, { call_ids: string[]; min_v: number | null; max_v: number | null }>> {
  if (rolloutIds.length === 0) return new Map();
  const calls: { rollout_id: string; call_ids: string[]; min_v: number | null; max_v: number | null }[] = await m.query(
    `SELECT "rollout_id", array_agg("id" ORDER BY "turn_index", "received_at", "id") AS call_ids, min(v) AS min_v, max(v) AS max_v FROM (
       SELECT "rollout_id", "id", "turn_index", "received_at",
              CASE WHEN octet_length("output_versions") >= 4
                   THEN get_byte("output_versions", 0) + 256 * get_byte("output_versions", 1) + 65536 * get_byte("output_versions", 2) END AS v
       FROM "llm_calls" WHERE "rollout_id" = ANY($1::varchar[])) x GROUP BY "rollout_id"`,
    [rolloutIds],
  );
  return new Map(calls.map((c) => [c.rollout_id, c]));
}
