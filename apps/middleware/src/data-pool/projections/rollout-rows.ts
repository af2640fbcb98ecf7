import type { EntityManager } from 'typeorm';
import type { EventEnvelope } from '@anvil/contracts';
import { UnknownRolloutError } from './errors';

type Db = Pick<EntityManager, 'query'>;

const iso = (ms: number) => new Date(ms).toISOString();

/** The first event of each rollout, in order: what one statement applies where one at a time the first would win. */
export function firstPerRollout<E extends { payload: { rolloutId: string } }>(events: readonly E[]): E[] {
  const seen = new Set<string>();
  return events.filter((e) => !seen.has(e.payload.rolloutId) && seen.add(e.payload.rolloutId) !== undefined);
}

/** A completion's reward rows: the outcome (ordinal 0) and its process rewards in order. */
function rewardRows(p: EventEnvelope<'rollout.completed'>['payload']) {
  return [
    ...(p.outcomeReward === null ? [] : [{ kind: 'outcome' as const, callId: null, value: p.outcomeReward, label: null, ordinal: 0 }]),
    ...p.processRewards.map((r, i) => ({
      kind: 'process' as const,
      callId: r.callId,
      value: r.value,
      label: r.label ?? null,
      ordinal: i + 1,
    })),
  ];
}

/**
 * Creates each rollout, and its group, task and task set if this is the first we hear of them
 * (placeholders the rollout manager may fill in through TaskStore), in one statement for the whole
 * run of events: the rows the foreign keys need are inserted by its CTEs, checked at its end, and on
 * PGlite every statement is a round trip to its thread. A rollout started twice keeps its first
 * start. Returns how many rollouts were new.
 */
export async function insertRolloutsStarted(m: Db, events: readonly EventEnvelope<'rollout.started'>[]): Promise<number> {
  const first = firstPerRollout(events);
  const ps = first.map((e) => e.payload);
  const rows: unknown[] = await m.query(
    `WITH "v" AS (SELECT * FROM unnest($1::varchar[], $2::varchar[], $3::varchar[], $4::int[], $5::varchar[], $6::int[], $7::varchar[], $8::text[], $9::int[], $10::timestamptz[], $11::varchar[])
                  AS v("task_set_id", "task_id", "group_id", "group_size", "rollout_id", "sample_index", "agent_kind", "agent_name", "version", "started_at", "event_id")),
          "ts" AS (INSERT INTO "task_sets" ("id", "name", "config") SELECT DISTINCT "task_set_id", "task_set_id", '{}'::jsonb FROM "v" ON CONFLICT DO NOTHING),
          "t" AS (INSERT INTO "tasks" ("id", "task_set_id", "spec") SELECT DISTINCT ON ("task_id") "task_id", "task_set_id", '{}'::jsonb FROM "v" ON CONFLICT DO NOTHING),
          "g" AS (INSERT INTO "rollout_groups" ("id", "task_id", "group_size") SELECT DISTINCT ON ("group_id") "group_id", "task_id", "group_size" FROM "v" ON CONFLICT DO NOTHING)
     INSERT INTO "rollouts" ("id", "group_id", "task_id", "sample_index", "agent_kind", "agent_name", "policy_version_at_start", "status", "started_at", "started_event_id")
     SELECT "rollout_id", "group_id", "task_id", "sample_index", "agent_kind", "agent_name", "version", 'running', "started_at", "event_id" FROM "v" ON CONFLICT DO NOTHING RETURNING 1`,
    [
      ps.map((p) => p.taskSetId),
      ps.map((p) => p.taskId),
      ps.map((p) => p.groupId),
      ps.map((p) => p.groupSize),
      ps.map((p) => p.rolloutId),
      ps.map((p) => p.sampleIndex),
      ps.map((p) => p.agent.kind),
      ps.map((p) => p.agent.name),
      ps.map((p) => p.policyVersionAtStart),
      ps.map((p) => iso(p.startedAt)),
      first.map((e) => e.id),
    ],
  );
  return rows.length;
}

/**
 * Completes each rollout once and stores its rewards with it, in one statement for the whole run of
 * events: the first completion of a rollout wins (here, and against one stored before; the UPDATE's
 * row lock makes a concurrent duplicate wait, then match nothing), rewards go in only for a rollout
 * completed here, and a completion of a rollout never started raises UnknownRolloutError. Returns
 * how many rollouts it completed.
 */
export async function completeRollouts(m: Db, events: readonly EventEnvelope<'rollout.completed'>[]): Promise<number> {
  const first = firstPerRollout(events);
  const rewards = first.flatMap((e) => rewardRows(e.payload).map((r) => ({ rolloutId: e.payload.rolloutId, ...r })));
  const ps = first.map((e) => e.payload);
  const rows: { id: string; updated: boolean; known: boolean }[] = await m.query(
    `WITH "v" AS (SELECT * FROM unnest($1::varchar[], $2::varchar[], $3::float8[], $4::int[], $5::text[], $6::timestamptz[], $7::varchar[])
                  AS v("id", "finish_reason", "outcome_reward", "num_calls", "error", "completed_at", "event_id")),
          "u" AS (UPDATE "rollouts" r SET "status" = 'completed', "finish_reason" = v."finish_reason", "outcome_reward" = v."outcome_reward", "num_calls" = v."num_calls",
                         "error" = v."error", "completed_at" = v."completed_at", "completed_event_id" = v."event_id"
                  FROM "v" WHERE r."id" = v."id" AND r."completed_event_id" IS NULL RETURNING r."id", v."event_id"),
          "r" AS (INSERT INTO "rewards" ("rollout_id", "call_id", "kind", "value", "label", "event_id", "ordinal")
                  SELECT "u"."id", x."call_id", x."kind", x."value", x."label", "u"."event_id", x."ordinal"
                  FROM "u" JOIN unnest($8::varchar[], $9::varchar[], $10::varchar[], $11::float8[], $12::varchar[], $13::int[]) AS x("rollout_id", "call_id", "kind", "value", "label", "ordinal")
                    ON x."rollout_id" = "u"."id"
                  ON CONFLICT DO NOTHING)
     SELECT v."id", EXISTS (SELECT 1 FROM "u" WHERE "u"."id" = v."id") AS "updated", EXISTS (SELECT 1 FROM "rollouts" WHERE "id" = v."id") AS "known" FROM "v"`,
    [
      ps.map((p) => p.rolloutId),
      ps.map((p) => p.finishReason),
      ps.map((p) => p.outcomeReward),
      ps.map((p) => p.numCalls),
      ps.map((p) => p.error),
      ps.map((p) => iso(p.completedAt)),
      first.map((e) => e.id),
      rewards.map((r) => r.rolloutId),
      rewards.map((r) => r.callId),
      rewards.map((r) => r.kind),
      rewards.map((r) => r.value),
      rewards.map((r) => r.label),
      rewards.map((r) => r.ordinal),
    ],
  );
  const unknown = rows.find((r) => !r.updated && !r.known);
  if (unknown) throw new UnknownRolloutError(unknown.id);
  return rows.filter((r) => r.updated).length;
}
