import { createEvent, type EventEnvelope, type LlmCallRecordedV1 } from '@anvil/contracts';
import type { MessageBus } from '@anvil/messaging';
import type { GatewaySession } from '@anvil/persistence';
import type { CaptureState, CaptureStore } from './capture-store';

/** One answered choice, ready to be recorded. */
export interface AnsweredCall {
  callId: string;
  branchId: string;
  parentCallId: string | null;
  turnIndex: number;
  promptIds: readonly number[];
  reusedPromptTokens: number;
  outputIds: readonly number[];
  logprobs: readonly number[];
  versions: readonly number[];
  finishReason: LlmCallRecordedV1['finishReason'];
  sampling: LlmCallRecordedV1['sampling'];
  timings: LlmCallRecordedV1['timings'];
  /** Capture state for the next call (null for calls nothing can extend, e.g. /v1/completions). */
  capture: CaptureState | null;
}

export class RecordNotDurableError extends Error {
  override readonly name = 'RecordNotDurableError';
}

/**
 * Makes answered calls durable BEFORE they are answered: one llm_call.recorded per choice,
 * published with acks=all (the bus resolves once the broker has it), keyed by rollout id so a
 * rollout's calls stay ordered. Then the capture state is written for the next call to extend.
 * A crash after the answer therefore loses no record; a crash before it loses only an
 * unanswered call (the agent sees an error and retries). The event id is the call id, so a
 * redelivered record is deduplicated by every consumer.
 */
export class CallRecorder {
  constructor(
    private readonly bus: MessageBus,
    private readonly captures: CaptureStore,
    private readonly producer: string,
  ) {}

  events(session: GatewaySession, model: string, calls: readonly AnsweredCall[]): EventEnvelope<'llm_call.recorded'>[] {
    return calls.map((c) =>
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
          turnIndex: c.turnIndex,
          model,
          promptIds: Int32Array.from(c.promptIds),
          reusedPromptTokens: c.reusedPromptTokens,
          outputIds: Int32Array.from(c.outputIds),
          outputLogprobs: Float32Array.from(c.logprobs),
          outputVersions: Uint32Array.from(c.versions),
          finishReason: c.finishReason,
          sampling: c.sampling,
          timings: c.timings,
        },
        { key: session.rolloutId, producer: this.producer, id: c.callId },
      ),
    );
  }

  /** Publishes the records (throws RecordNotDurableError when the broker does not take them). */
  async record(session: GatewaySession, model: string, calls: readonly AnsweredCall[]): Promise<{ captureSaved: boolean; error?: unknown }> {
    try {
      await this.bus.publish(this.events(session, model, calls));
    } catch (err) {
      throw new RecordNotDurableError(`the call could not be recorded durably: ${(err as Error).message}`, { cause: err });
    }
    // The records are durable: from here on the answer goes out. Failing to save the capture
    // state costs only token-exact extension (the next turn starts a branch), not data.
    try {
      await this.captures.save(calls.flatMap((c) => (c.capture ? [c.capture] : [])));
      return { captureSaved: true };
    } catch (error) {
      return { captureSaved: false, error };
    }
  }
}
