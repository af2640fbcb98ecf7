import { encodeEvent, topicOf, type EventEnvelope } from '@anvil/contracts';
import type { RawMessage } from './bus';
import { HEADERS } from './headers';
import type { TopicNamespace } from './topic-names';
import { boundTraceContext, injectTraceContext } from './trace-propagation';

/** A message ready for either bus: physical topic, key, ANV1 bytes, string/Buffer headers. */
export interface PreparedMessage {
  topic: string;
  key: string | null;
  value: Buffer | null;
  headers: Record<string, string | Buffer>;
}

/**
 * Encodes every event before anything is written, so an invalid or oversized event rejects the
 * whole publish (with the codec's ContractError) and nothing is half-sent.
 */
export function prepareEvents(ns: TopicNamespace, events: EventEnvelope | readonly EventEnvelope[]): PreparedMessage[] {
  const list: readonly EventEnvelope[] = Array.isArray(events) ? events : [events as EventEnvelope];
  const encoded = list.map((event) => ({ event, value: encodeEvent(event) }));
  return encoded.map(({ event, value }) => ({
    topic: ns.physical(topicOf(event.type)),
    key: event.key,
    value,
    headers: injectTraceContext({ [HEADERS.eventType]: event.type, [HEADERS.eventId]: event.id }, boundTraceContext(event)),
  }));
}

export function prepareRaw(ns: TopicNamespace, topic: string, message: RawMessage): PreparedMessage {
  return { topic: ns.physical(topic), key: message.key, value: message.value, headers: { ...message.headers } };
}
