import { randomUUID } from 'node:crypto';
import { decodeFrame, encodeFrame, isFrame } from './codec/binary-frame';
import { ContractError } from './errors';
import { EVENTS, isEventType, type EventPayload, type EventPayloadAt, type EventType, type EventVersion } from './events/registry';
import { MAX_EVENT_BYTES } from './topics';

/**
 * What travels on the bus. `id` is the idempotency key: every consumer and every write
 * is idempotent by it. `key` is the partition key (the rollout id for trajectory data).
 */
export interface EventEnvelope<T extends EventType = EventType> {
  id: string;
  type: T;
  version: number;
  occurredAt: number;
  key: string;
  producer: string;
  payload: EventPayload<T>;
}

export type AnyEventEnvelope = { [T in EventType]: EventEnvelope<T> }[EventType];

export function createEvent<T extends EventType>(
  type: T,
  payload: EventPayload<T>,
  opts: { key: string; producer: string; id?: string; occurredAt?: number },
): EventEnvelope<T> {
  return {
    id: opts.id ?? randomUUID(),
    type,
    version: EVENTS[type].current,
    occurredAt: opts.occurredAt ?? Date.now(),
    key: opts.key,
    producer: opts.producer,
    payload,
  };
}

/**
 * An event of an explicit (older) version, for tests of readers and for producers that have
 * not moved on yet. Typed by the version's own schema.
 */
export function createEventAt<T extends EventType, V extends EventVersion<T>>(
  type: T,
  version: V,
  payload: EventPayloadAt<T, V>,
  opts: { key: string; producer: string; id?: string; occurredAt?: number },
): Omit<EventEnvelope<T>, 'payload'> & { payload: EventPayloadAt<T, V> } {
  return {
    id: opts.id ?? randomUUID(),
    type,
    version,
    occurredAt: opts.occurredAt ?? Date.now(),
    key: opts.key,
    producer: opts.producer,
    payload,
  };
}

export function topicOf(type: EventType): string {
  return EVENTS[type].topic;
}

function schemaFor(type: unknown, version: unknown) {
  if (!isEventType(type)) throw new ContractError('unknown_type', `unknown event type ${JSON.stringify(type)}`);
  const versions = EVENTS[type].versions as Record<
    number,
    { safeParse(v: unknown): { success: boolean; data?: unknown; error?: { issues: { path: PropertyKey[]; message: string }[] } } }
  >;
  const schema = typeof version === 'number' ? versions[version] : undefined;
  if (!schema) {
    throw new ContractError(
      'unknown_version',
      `${type} version ${JSON.stringify(version)} is not supported (supported: ${Object.keys(versions).join(', ')})`,
    );
  }
  return schema;
}

/** Validates an envelope (header fields and payload) and returns it typed. */
export function validateEvent(raw: unknown): AnyEventEnvelope {
  if (raw === null || typeof raw !== 'object') throw new ContractError('invalid_payload', 'event must be an object');
  const env = raw as Record<string, unknown>;
  const schema = schemaFor(env.type, env.version);
  const problems: string[] = [];
  if (typeof env.id !== 'string' || env.id.length === 0 || env.id.length > 128)
    problems.push('id: must be a non-empty string of at most 128 chars');
  if (typeof env.key !== 'string' || env.key.length === 0) problems.push('key: must be a non-empty string');
  if (typeof env.producer !== 'string') problems.push('producer: must be a string');
  if (typeof env.occurredAt !== 'number' || !Number.isFinite(env.occurredAt))
    problems.push('occurredAt: must be a number (ms since epoch)');
  const parsed = schema.safeParse(env.payload);
  if (!parsed.success) {
    for (const issue of parsed.error?.issues ?? []) problems.push(`payload.${issue.path.map(String).join('.')}: ${issue.message}`);
  }
  if (problems.length > 0)
    throw new ContractError('invalid_payload', `${String(env.type)} v${String(env.version)}: ${problems.join('; ')}`);
  return { ...(env as unknown as AnyEventEnvelope), payload: parsed.data } as AnyEventEnvelope;
}

/** Encodes an event of any supported version (validated against that version's schema). */
export function encodeEvent(event: EventEnvelope | (Omit<EventEnvelope, 'payload'> & { payload: unknown })): Buffer {
  validateEvent(event);
  const buf = encodeFrame(event);
  if (buf.length > MAX_EVENT_BYTES) {
    throw new ContractError('oversized', `${event.type} encodes to ${buf.length} bytes (limit ${MAX_EVENT_BYTES})`);
  }
  return buf;
}

export function decodeEvent(buf: Uint8Array): AnyEventEnvelope {
  if (buf.length > MAX_EVENT_BYTES) throw new ContractError('oversized', `message of ${buf.length} bytes exceeds ${MAX_EVENT_BYTES}`);
  if (!isFrame(buf)) throw new ContractError('malformed_frame', 'not an Anvil event frame');
  return validateEvent(decodeFrame(buf));
}
