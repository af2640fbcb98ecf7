import { createEvent, llmCallDelta, type EventEnvelope, type LlmCallRecordedV1 } from '@anvil/contracts';
import type { GatewaySession } from '@anvil/persistence';
import { context } from '@opentelemetry/api';
import { storedCapture, type CaptureState, type CaptureStore } from './capture-store';
import type { RecordCommitter, SessionStateRow } from './record-committer';

export { RecordNotDurableError } from './record-committer';

/** One answered choice, ready to be recorded (its turn index is assigned when it is). */
export interface AnsweredCall {
  callId: string;
  branchId: string;
  parentCallId: string | null;
  promptIds: readonly number[];
  reusedPromptTokens: number;
  outputIds: readonly number[];
  logprobs: readonly number[];
  versions: readonly number[];
  /** Constrained decoding (a forced tool call): one mark per output id, 1 sampled within a mask, 2 forced. */
  constrained?: readonly number[];
  finishReason: LlmCallRecordedV1['finishReason'];
  sampling: LlmCallRecordedV1['sampling'];
  timings: LlmCallRecordedV1['timings'];
  /** Capture state for the next call (null for calls nothing can extend, e.g. /v1/completions). */
  capture: Omit<CaptureState, 'turnIndex'> | null;
}

/**
 * Makes answered calls durable BEFORE they are answered: one llm_call.recorded per choice,
 * keyed by rollout id so a rollout's calls stay ordered, and the capture state the next call
 * extends, committed together to PostgreSQL (the event through the outbox, published to Kafka
 * right after; see RecordCommitter and OutboxRelay: all of it is group-committed with other
 * calls finishing at the same time). A crash after the answer therefore loses no record; a
 * crash before it loses only an unanswered call (the agent sees an error and retries). The
 * event id is the call id, so a record published twice is deduplicated by every consumer.
 */
export class CallRecorder {
  constructor(
    private readonly committer: RecordCommitter,
    private readonly captures: CaptureStore,
    private readonly producer: string,
  ) {}

  /** The calls' events, with turn indexes counted from `firstTurn`. */
  events(session: GatewaySession, model: string, calls: readonly AnsweredCall[], firstTurn: number): EventEnvelope<'llm_call.recorded'>[] {
    return calls.map((c, i) =>
      createEvent(
        'llm_call.recorded',
        {
          callId: c.callId,
          sessionId: session.id,
          rolloutId: session.rolloutId,
          groupId: session.groupId,
          taskId: session.taskId,
          branchId: c.branchId,
          parentCallId: c.parentCallId,
          turnIndex: firstTurn + i,
          model,
          ...llmCallDelta(c.promptIds, c.reusedPromptTokens),
          outputIds: Int32Array.from(c.outputIds),
          outputLogprobs: Float32Array.from(c.logprobs),
          outputVersions: Uint32Array.from(c.versions),
          ...(c.constrained ? { outputConstraint: Uint8Array.from(c.constrained) } : {}),
          finishReason: c.finishReason,
          sampling: c.sampling,
          timings: c.timings,
        },
        { key: session.rolloutId, producer: this.producer, id: c.callId },
      ),
    );
  }

  /**
   * Records the calls (throws RecordNotDurableError when the database does not take them);
   * null when the session was closed meanwhile (nothing recorded). `parent` is the
   * state the calls extend (their capture rows are stored relative to it).
   */
  async record(
    session: GatewaySession,
    model: string,
    calls: readonly AnsweredCall[],
    opts: { newBranches: number; parent: CaptureState | null; responses?: readonly SessionStateRow[] },
  ): Promise<{ firstTurn: number } | null> {
    // The batch is published later, from the relay: each event keeps its own call's trace.
    const trace = context.active();
    const result = await this.committer.commit({
      sessionId: session.id,
      calls: calls.length,
      newBranches: opts.newBranches,
      captures: calls.flatMap((c, turn) => (c.capture ? [{ turn, row: storedCapture({ ...c.capture, turnIndex: 0 }, opts.parent) }] : [])),
      records: this.events(session, model, calls, 0),
      ...(opts.responses?.length ? { responses: opts.responses } : {}),
      trace,
    });
    if (result) calls.forEach((c, i) => c.capture && this.captures.remember({ ...c.capture, turnIndex: result.firstTurn + i }));
    return result;
  }

  /**
   * Session state without records (capture off): the same statement with no calls, so it is
   * still written only while the session is open. False when the session was closed meanwhile.
   */
  async storeOnly(sessionId: string, responses: readonly SessionStateRow[]): Promise<boolean> {
    return (await this.committer.commit({ sessionId, calls: 0, newBranches: 0, captures: [], records: [], responses })) !== null;
  }
}
