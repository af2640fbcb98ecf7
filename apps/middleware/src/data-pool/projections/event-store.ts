import type { DataSource, EntityManager } from 'typeorm';
import { llmCallV1ToV2, type AnyEventEnvelope, type EventEnvelope, type LlmCallRecordedV1 } from '@anvil/contracts';
import { Checkpoint, PolicyActivation, PolicyVersion, Trajectory, inTransaction, insertIgnoringDuplicates } from '@anvil/persistence';
import { insertLlmCalls, type LlmCallRow } from './llm-call-insert';
import { completeRollouts, insertRolloutsStarted } from './rollout-rows';

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
      case 'weights.published':
        return this.recordWeightsPublished(event, manager);
      case 'policy_version.activated':
        return this.recordPolicyVersionActivated(event, manager);
      // Not projected here: the Data Pool runtime reads acknowledgements and settlements itself, and
      // the batch cut writes what a train batch records (the batch log, its trajectories scheduled)
      // in its own transaction, so the pool's batches coming back on the bus are not applied again.
      case 'rollout_group.settled':
      case 'train_batch.trained':
      case 'train_batch.created':
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

  /** Creates the rollouts (and their group, task and task set placeholders); a rollout started twice keeps its first start. Returns how many were new. */
  recordRolloutsStarted(events: readonly EventEnvelope<'rollout.started'>[], manager?: EntityManager): Promise<number> {
    return insertRolloutsStarted(manager ?? this.ds.manager, events);
  }

  /** Completes the rollouts with their rewards (the first completion wins); a rollout never started raises UnknownRolloutError. Returns how many it completed. */
  recordRolloutsCompleted(events: readonly EventEnvelope<'rollout.completed'>[], manager?: EntityManager): Promise<number> {
    return completeRollouts(manager ?? this.ds.manager, events);
  }

  async recordRolloutStarted(event: EventEnvelope<'rollout.started'>, manager?: EntityManager): Promise<boolean> {
    return (await this.recordRolloutsStarted([event], manager)) > 0;
  }

  async recordRolloutCompleted(event: EventEnvelope<'rollout.completed'>, manager?: EntityManager): Promise<boolean> {
    return (await this.recordRolloutsCompleted([event], manager)) > 0;
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
