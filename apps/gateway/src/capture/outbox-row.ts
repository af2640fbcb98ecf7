import { decodeEvent, encodeEvent, llmCallDelta, type EventEnvelope } from '@anvil/contracts';

/**
 * The one home of how an llm_call.recorded is stored in the gateway's outbox (`gateway_outbox`,
 * migration 1796300000000) and read back: the rule, its encoding and its decoding.
 *
 *  - The frame carries the turn RELATIVE to its request (0..n-1); the row's `turn_index` holds
 *    the absolute turn the commit statement reserved (first_turn + k, computed in SQL).
 *  - A call that has a capture row (every chat call) is stored WITHOUT its prompt ids: that row
 *    already holds them as a delta of its parent, and whole prompts here would grow with the
 *    square of a session's length. `prompt_from_capture` says so, `reused_prompt_tokens` keeps
 *    what the prompt-less frame cannot: the length of the reused prefix.
 *  - Decoding rebuilds the event as published: absolute turn, and the prompt from the capture
 *    chain (v1 rows, written before llm_call.recorded v2, carried whole prompts; v2 carries the
 *    ids after the reused prefix).
 * Encoding validates the event (encodeEvent): one the bus would refuse must not be answered.
 */
export interface OutboxEntry {
  id: string;
  sessionId: string;
  /** Turn offset within the request (the committer adds the request's offset in its batch). */
  k: number;
  frame: Buffer;
  promptFromCapture: boolean;
  reusedPromptTokens: number;
}

/** A stored row as the sweeper reads it. */
export interface StoredOutboxRow {
  event_id: string;
  turn_index: number;
  frame: Buffer;
  prompt_from_capture: boolean;
  reused_prompt_tokens: number;
}

const EMPTY_PROMPT = new Int32Array(0);

/** The outbox row of one event of a request; `captured`: the call has a capture row (its prompt is left out). */
export function encodeOutboxRow(event: EventEnvelope<'llm_call.recorded'>, sessionId: string, captured: boolean): OutboxEntry {
  const stored = captured
    ? { ...event, payload: { ...event.payload, promptLength: 0, promptDeltaIds: EMPTY_PROMPT, reusedPromptTokens: 0 } }
    : event;
  return {
    id: event.id,
    sessionId,
    k: event.payload.turnIndex,
    frame: encodeEvent(stored),
    promptFromCapture: captured,
    reusedPromptTokens: event.payload.reusedPromptTokens,
  };
}

/** The event a stored row publishes; `promptOf` rebuilds a captured call's prompt from its capture chain (null: it cannot). */
export async function decodeOutboxRow(
  row: StoredOutboxRow,
  promptOf: ((callId: string) => Promise<readonly number[] | null>) | undefined,
): Promise<EventEnvelope> {
  const event = decodeEvent(row.frame);
  if (event.type !== 'llm_call.recorded') return event;
  const payload = { ...event.payload, turnIndex: Number(row.turn_index) };
  if (row.prompt_from_capture) {
    const prompt = await promptOf?.(row.event_id);
    if (!prompt) throw new Error(`the prompt of ${row.event_id} cannot be rebuilt from its capture row`);
    if (event.version === 1)
      Object.assign(payload, { promptIds: Int32Array.from(prompt), reusedPromptTokens: Number(row.reused_prompt_tokens) });
    else Object.assign(payload, llmCallDelta(prompt, Number(row.reused_prompt_tokens)));
  }
  return { ...event, payload } as unknown as EventEnvelope;
}

/** The event as published once its turns are reserved: a copy with the absolute turn (the request's event is left as it is). */
export const withAbsoluteTurn = (event: EventEnvelope<'llm_call.recorded'>, firstTurn: number): EventEnvelope<'llm_call.recorded'> => ({
  ...event,
  payload: { ...event.payload, turnIndex: event.payload.turnIndex + firstTurn },
});
