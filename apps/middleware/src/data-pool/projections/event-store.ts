import { In, IsNull, type DataSource, type EntityManager } from 'typeorm';
import { llmCallV1ToV2, type AnyEventEnvelope, type EventEnvelope, type LlmCallRecordedV1, type TrainBatchV1 } from '@anvil/contracts';
import {
  Checkpoint,
  PolicyActivation,
  PolicyVersion,
  TrainBatch,
  Trajectory,
  inTransaction,
  insertIgnoringDuplicates,
} from '@anvil/persistence';
import { UnknownRolloutError } from './errors';
import { insertLlmCalls, type LlmCallRow } from './llm-call-insert';

const at = (ms: number) => new Date(ms);

type LlmCallEnvelope = EventEnvelope<'llm_call.recorded'>;
type LlmCallV1Envelope = Omit<LlmCallEnvelope, 'payload'> & { payload: LlmCallRecordedV1 };

/** Token bytes per multi-row llm-call insert: large enough to amortise, small enough for one statement. */
const MAX_INSERT_BYTES = 8 * 1024 * 1024;

/**
 * A call row stores only what its event carries after the reused prefix (v2; a v1 event is cut
 * to the same delta): `prompt_prefix_tokens` leading ids are the parent's prompt + output ids.
 */
function llmCallRow(event: LlmCallEnvelope | LlmCallV1Envelope): LlmCallRow {
  const p = event.version === 1 ? llmCallV1ToV2((event as LlmCallV1Envelope).payload) : (event as LlmCallEnvelope).payload;
  return {
    id: p.callId,
    eventId: event.id,
    sessionId: p.sessionId,
    rolloutId: p.rolloutId,
    groupId: p.groupId,
    taskId: p.taskId,
    branchId: p.branchId,
    parentCallId: p.parentCallId,
    turnIndex: p.turnIndex,
    model: p.model,
    promptIds: p.promptDeltaIds,
    reusedPromptTokens: p.reusedPromptTokens,
    promptPrefixTokens: p.parentCallId === null ? 0 : p.reusedPromptTokens,
    outputIds: p.outputIds,
    outputLogprobs: p.outputLogprobs,
    outputVersions: p.outputVersions,
    promptTokens: p.promptLength,
    outputTokens: p.outputIds.length,
    finishReason: p.finishReason,
    sampling: p.sampling,
    receivedAt: at(p.timings.receivedAt),
    firstTokenAt: p.timings.firstTokenAt === null ? null : at(p.timings.firstTokenAt),
    finishedAt: at(p.timings.finishedAt),
  };
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

/** The first event of each rollout, in order: what one statement applies where one at a time the first would win. */
export function firstPerRollout<E extends { payload: { rolloutId: string } }>(events: readonly E[]): E[] {
  const seen = new Set<string>();
  return events.filter((e) => !seen.has(e.payload.rolloutId) && seen.add(e.payload.rolloutId) !== undefined);
}

/**
 * Writes events into the Data Pool tables, idempotently by event id: every method returns
 * true when the event changed the database and false for a redelivery (or a duplicate of
 * something already recorded), and never raises on duplicates, concurrent ones included.
 *
 * Each method takes an optional EntityManager: inside a transaction (e.g. the one
 * ProcessedEventStore.withEventOnce opens) the write joins it.
 */
export class EventStore {
  constructor(private readonly ds: DataSource) {}

  applyEvent(event: AnyEventEnvelope, manager?: EntityManager): Promise<boolean> {
    switch (event.type) {
      case 'llm_call.recorded':
        return this.recordLlmCall(event, manager);
      case 'rollout.started':
        return this.recordRolloutStarted(event, manager);
      case 'rollout.completed':
        return this.recordRolloutCompleted(event, manager);
      case 'trajectory.ready':
        return this.recordTrajectory(event, manager);
      case 'train_batch.created':
        return this.recordTrainBatch(event, manager);
      case 'weights.published':
        return this.recordWeightsPublished(event, manager);
      case 'policy_version.activated':
        return this.recordPolicyVersionActivated(event, manager);
      // Read by the Data Pool runtime (groups, scheduling, retention), not projected here.
      case 'rollout_group.settled':
      case 'train_batch.trained':
      case 'evaluation.requested':
      case 'evaluation.completed':
        return Promise.resolve(false);
      default: {
        const unknown: never = event;
        throw new Error(`no persistence for event type ${(unknown as { type: string }).type}`);
      }
    }
  }

  async recordLlmCall(event: EventEnvelope<'llm_call.recorded'>, manager?: EntityManager): Promise<boolean> {
    return (await insertLlmCalls(manager ?? this.ds.manager, [llmCallRow(event)])) > 0;
  }

  /**
   * Applies events in order inside the caller's transaction, writing runs of llm calls as
   * multi-row inserts (a few MiB a statement): the Data Pool's batch path, where one
   * round trip per call would cost more than the rows themselves. Returns how many changed
   * the database.
   */
  async applyEvents(events: readonly AnyEventEnvelope[], manager: EntityManager): Promise<number> {
    let changed = 0;
    let run: LlmCallEnvelope[] = [];
    let runBytes = 0;
    let rollouts: { type: 'rollout.started' | 'rollout.completed'; events: AnyEventEnvelope[] } | null = null;
    const flush = async () => {
      if (run.length) changed += await insertLlmCalls(manager, run.map(llmCallRow));
      run = [];
      runBytes = 0;
      if (rollouts?.type === 'rollout.started')
        changed += await this.recordRolloutsStarted(rollouts.events as EventEnvelope<'rollout.started'>[], manager);
      if (rollouts?.type === 'rollout.completed')
        changed += await this.recordRolloutsCompleted(rollouts.events as EventEnvelope<'rollout.completed'>[], manager);
      rollouts = null;
    };
    for (const event of events) {
      if (event.type === 'llm_call.recorded') {
        const bytes =
          (event.version === 1
            ? (event.payload as unknown as LlmCallRecordedV1).promptIds.byteLength
            : event.payload.promptDeltaIds.byteLength) +
          event.payload.outputIds.byteLength * 3;
        if (rollouts || runBytes + bytes > MAX_INSERT_BYTES) await flush();
        run.push(event);
        runBytes += bytes;
        continue;
      }
      // consecutive rollout starts (or completions) are one statement, in their order
      if (event.type === 'rollout.started' || event.type === 'rollout.completed') {
        if (run.length || (rollouts && rollouts.type !== event.type)) await flush();
        rollouts ??= { type: event.type, events: [] };
        rollouts.events.push(event);
        continue;
      }
      await flush();
      if (await this.applyEvent(event, manager)) changed++;
    }
    await flush();
    return changed;
  }

  /**
   * recordRolloutStarted for a run of events in one statement; a rollout started twice keeps its
   * first start. Returns how many rollouts were new.
   */
  async recordRolloutsStarted(events: readonly EventEnvelope<'rollout.started'>[], manager?: EntityManager): Promise<number> {
    if (events.length === 1) return (await this.recordRolloutStarted(events[0], manager)) ? 1 : 0;
    const first = firstPerRollout(events);
    const ps = first.map((e) => e.payload);
    const rows: unknown[] = await (manager ?? this.ds.manager).query(
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
        ps.map((p) => at(p.startedAt).toISOString()),
        first.map((e) => e.id),
      ],
    );
    return rows.length;
  }

  /**
   * recordRolloutCompleted for a run of events in one statement: the first completion of a
   * rollout wins (here, and against one stored before), rewards go in with it, and a completion of
   * a rollout never started raises UnknownRolloutError. Returns how many rollouts it completed.
   */
  async recordRolloutsCompleted(events: readonly EventEnvelope<'rollout.completed'>[], manager?: EntityManager): Promise<number> {
    if (events.length === 1) return (await this.recordRolloutCompleted(events[0], manager)) ? 1 : 0;
    const first = firstPerRollout(events);
    const rewards = first.flatMap((e) => rewardRows(e.payload).map((r) => ({ rolloutId: e.payload.rolloutId, ...r })));
    const ps = first.map((e) => e.payload);
    const rows: { id: string; updated: boolean; known: boolean }[] = await (manager ?? this.ds.manager).query(
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
        ps.map((p) => at(p.completedAt).toISOString()),
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

  /**
   * Creates the rollout, and its group, task and task set if this is the first we hear of
   * them (placeholders the rollout manager may fill in through TaskStore). One statement (the
   * rows the foreign keys need are inserted by its CTEs, checked at its end): on PGlite every
   * statement is a round trip to its thread, and this ran once per rollout as four.
   */
  async recordRolloutStarted(event: EventEnvelope<'rollout.started'>, manager?: EntityManager): Promise<boolean> {
    const p = event.payload;
    const rows: unknown[] = await (manager ?? this.ds.manager).query(
      `WITH "ts" AS (INSERT INTO "task_sets" ("id", "name", "config") VALUES ($1::varchar, $1::varchar, '{}'::jsonb) ON CONFLICT DO NOTHING),
            "t" AS (INSERT INTO "tasks" ("id", "task_set_id", "spec") VALUES ($2::varchar, $1::varchar, '{}'::jsonb) ON CONFLICT DO NOTHING),
            "g" AS (INSERT INTO "rollout_groups" ("id", "task_id", "group_size") VALUES ($3::varchar, $2::varchar, $4::int) ON CONFLICT DO NOTHING)
       INSERT INTO "rollouts" ("id", "group_id", "task_id", "sample_index", "agent_kind", "agent_name", "policy_version_at_start", "status", "started_at", "started_event_id")
       VALUES ($5::varchar, $3::varchar, $2::varchar, $6::int, $7::varchar, $8::text, $9::int, 'running', $10::timestamptz, $11::varchar) ON CONFLICT DO NOTHING RETURNING 1`,
      [
        p.taskSetId,
        p.taskId,
        p.groupId,
        p.groupSize,
        p.rolloutId,
        p.sampleIndex,
        p.agent.kind,
        p.agent.name,
        p.policyVersionAtStart,
        at(p.startedAt).toISOString(),
        event.id,
      ],
    );
    return rows.length > 0;
  }

  /**
   * Completes the rollout once (the first completion wins) and stores its rewards with it, in one
   * statement (it ran once per rollout as two or three). The UPDATE's row lock makes a concurrent
   * duplicate wait, then match nothing; the rewards are inserted only for a rollout completed here.
   */
  async recordRolloutCompleted(event: EventEnvelope<'rollout.completed'>, manager?: EntityManager): Promise<boolean> {
    const p = event.payload;
    const rewards = rewardRows(p);
    const rows: { updated: number; known: boolean }[] = await (manager ?? this.ds.manager).query(
      `WITH "u" AS (UPDATE "rollouts" SET "status" = 'completed', "finish_reason" = $2::varchar, "outcome_reward" = $3::float8, "num_calls" = $4::int, "error" = $5::text,
                           "completed_at" = $6::timestamptz, "completed_event_id" = $7::varchar
                    WHERE "id" = $1::varchar AND "completed_event_id" IS NULL RETURNING "id"),
            "r" AS (INSERT INTO "rewards" ("rollout_id", "call_id", "kind", "value", "label", "event_id", "ordinal")
                    SELECT "u"."id", x."call_id", x."kind", x."value", x."label", $7::varchar, x."ordinal"
                    FROM "u", unnest($8::varchar[], $9::varchar[], $10::float8[], $11::varchar[], $12::int[]) AS x("call_id", "kind", "value", "label", "ordinal")
                    ON CONFLICT DO NOTHING)
       SELECT (SELECT count(*) FROM "u")::int AS "updated", EXISTS (SELECT 1 FROM "rollouts" WHERE "id" = $1::varchar) AS "known"`,
      [
        p.rolloutId,
        p.finishReason,
        p.outcomeReward,
        p.numCalls,
        p.error,
        at(p.completedAt).toISOString(),
        event.id,
        rewards.map((r) => r.callId),
        rewards.map((r) => r.kind),
        rewards.map((r) => r.value),
        rewards.map((r) => r.label),
        rewards.map((r) => r.ordinal),
      ],
    );
    if (Number(rows[0].updated) > 0) return true;
    if (!rows[0].known) throw new UnknownRolloutError(p.rolloutId);
    return false;
  }

  async recordTrajectory(event: EventEnvelope<'trajectory.ready'>, manager?: EntityManager): Promise<boolean> {
    const p = event.payload;
    const inserted = await insertIgnoringDuplicates(manager ?? this.ds.manager, Trajectory, {
      id: p.trajectoryId,
      eventId: event.id,
      rolloutId: p.rolloutId,
      groupId: p.groupId,
      taskId: p.taskId,
      callIds: p.callIds,
      finishReason: p.finishReason,
      reward: p.reward,
      advantage: p.advantage,
      lossMasked: p.lossMasked,
      minPolicyVersion: p.minPolicyVersion,
      maxPolicyVersion: p.maxPolicyVersion,
      promptTokens: p.promptTokens,
      outputTokens: p.outputTokens,
      readyAt: at(p.readyAt),
      status: 'ready',
      trainBatchId: null,
    });
    return inserted > 0;
  }

  /** Records the batch and marks its trajectories scheduled, in one transaction. */
  recordTrainBatch(event: EventEnvelope<'train_batch.created'>, manager?: EntityManager): Promise<boolean> {
    const p = event.payload;
    return inTransaction(this.ds, manager, async (m) => {
      // v1 inlines its samples; v2 (claim-check) counts them in its stats.
      const numTokens =
        event.version === 1
          ? (p as unknown as TrainBatchV1).samples.reduce((sum, s) => sum + s.promptIds.length + s.outputIds.length, 0)
          : p.stats.totalTokens;
      const inserted = await insertIgnoringDuplicates(m, TrainBatch, {
        id: p.batchId,
        eventId: event.id,
        step: p.step,
        policyVersion: p.policyVersion,
        trajectoryIds: p.trajectoryIds,
        sampleIds: p.samples.map((s) => s.sampleId),
        numSamples: p.samples.length,
        numTokens: String(numTokens),
        createdAt: at(p.createdAt),
      });
      if (inserted === 0) return false;
      if (p.trajectoryIds.length > 0) {
        await m
          .createQueryBuilder()
          .update(Trajectory)
          .set({ status: 'scheduled', trainBatchId: p.batchId })
          .where({ id: In(p.trajectoryIds), trainBatchId: IsNull() })
          .execute();
      }
      return true;
    });
  }

  /** Records the checkpoint and the policy version it defines. */
  recordWeightsPublished(event: EventEnvelope<'weights.published'>, manager?: EntityManager): Promise<boolean> {
    const p = event.payload;
    return inTransaction(this.ds, manager, async (m) => {
      await insertIgnoringDuplicates(m, Checkpoint, {
        id: p.checkpointId,
        eventId: event.id,
        version: p.version,
        step: p.step,
        uri: p.checkpointUri,
        format: p.format,
        sha256: p.sha256,
        publishedAt: at(p.publishedAt),
      });
      const inserted = await insertIgnoringDuplicates(m, PolicyVersion, {
        version: p.version,
        parentVersion: p.parentVersion,
        step: p.step,
        checkpointId: p.checkpointId,
        publishedAt: at(p.publishedAt),
        eventId: event.id,
      });
      return inserted > 0;
    });
  }

  async recordPolicyVersionActivated(event: EventEnvelope<'policy_version.activated'>, manager?: EntityManager): Promise<boolean> {
    const p = event.payload;
    const inserted = await insertIgnoringDuplicates(manager ?? this.ds.manager, PolicyActivation, {
      eventId: event.id,
      version: p.version,
      deployment: p.deployment,
      swapPolicy: p.swapPolicy,
      activatedAt: at(p.activatedAt),
    });
    return inserted > 0;
  }
}
