import type { DeadLetterReason } from './bus';

/**
 * Header names the bus writes. Both buses build retry and dead-letter copies with the helpers
 * below, so a DLQ message looks the same whether it came from Kafka or the embedded bus.
 */
export const HEADERS = {
  /** Set on publish, for tools that filter without decoding. */
  eventType: 'anvil-event-type',
  eventId: 'anvil-event-id',
  /** Handler attempts made so far (0 for poison messages, never attempted). */
  attempts: 'anvil-attempts',
  /** Passes through the retry topic so far; bounds the retry loop. */
  retryRound: 'anvil-retry-round',
  /** Epoch ms before which a retry-topic copy must not be attempted. */
  notBefore: 'anvil-retry-not-before',
  group: 'anvil-group',
  originalTopic: 'anvil-original-topic',
  originalPartition: 'anvil-original-partition',
  originalOffset: 'anvil-original-offset',
  /** Dead letters: ContractError.reason for poison messages, `handler_failed` otherwise. */
  reason: 'anvil-dlq-reason',
  /** Last error message (truncated to ERROR_HEADER_LIMIT). */
  error: 'anvil-error',
  failedAt: 'anvil-failed-at',
} as const;

/** Bookkeeping headers: replaced, never accumulated, when a copy is forwarded again. */
const DELIVERY_HEADERS: ReadonlySet<string> = new Set([
  HEADERS.attempts,
  HEADERS.retryRound,
  HEADERS.notBefore,
  HEADERS.group,
  HEADERS.originalTopic,
  HEADERS.originalPartition,
  HEADERS.originalOffset,
  HEADERS.reason,
  HEADERS.error,
  HEADERS.failedAt,
]);

/** Kafka headers ride in every fetch; a stack trace of a deep handler error does not belong there. */
export const ERROR_HEADER_LIMIT = 4096;

export type HeaderValue = string | Buffer | (string | Buffer)[] | undefined;

/**
 * kafkajs hands headers over as Buffers (an array when a key repeats); the embedded bus stores
 * Buffers too. Handlers see UTF-8 strings; on a repeated key the first value wins.
 */
export function normalizeHeaders(headers: Record<string, HeaderValue> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!headers) return out;
  for (const [name, raw] of Object.entries(headers)) {
    const value = Array.isArray(raw) ? raw[0] : raw;
    if (value === undefined) continue;
    out[name] = Buffer.isBuffer(value) ? value.toString('utf8') : String(value);
  }
  return out;
}

/** Where a message was first published, carried along through retry and DLQ copies. */
export interface Origin {
  topic: string;
  partition: number;
  offset: string;
}

/** Delivery state of a message: fresh from its topic, or a retry-topic copy. */
export interface DeliveryState {
  origin: Origin;
  attemptsSoFar: number;
  retryRound: number;
  notBefore: number;
}

export function readDeliveryState(headers: Readonly<Record<string, string>>, isRetryCopy: boolean, fallback: Origin): DeliveryState {
  if (!isRetryCopy) return { origin: fallback, attemptsSoFar: 0, retryRound: 0, notBefore: 0 };
  const int = (name: string) => {
    const n = Number(headers[name]);
    return Number.isFinite(n) && n >= 0 ? Math.floor(n) : 0;
  };
  const topic = headers[HEADERS.originalTopic];
  const partition = Number(headers[HEADERS.originalPartition]);
  const offset = headers[HEADERS.originalOffset];
  // A retry copy written by something other than this bus may lack the origin; fall back to the copy itself.
  const origin = topic && Number.isInteger(partition) && offset ? { topic, partition, offset } : fallback;
  return { origin, attemptsSoFar: int(HEADERS.attempts), retryRound: int(HEADERS.retryRound), notBefore: int(HEADERS.notBefore) };
}

/** Original headers (trace context, event type/id) with the bus's bookkeeping removed. */
export function carriedHeaders(headers: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) if (!DELIVERY_HEADERS.has(k)) out[k] = v;
  return out;
}

function originHeaders(origin: Origin, group: string): Record<string, string> {
  return {
    [HEADERS.group]: group,
    [HEADERS.originalTopic]: origin.topic,
    [HEADERS.originalPartition]: String(origin.partition),
    [HEADERS.originalOffset]: origin.offset,
  };
}

export function truncateError(message: string): string {
  return message.length <= ERROR_HEADER_LIMIT ? message : `${message.slice(0, ERROR_HEADER_LIMIT - 15)}… [truncated]`;
}

export function retryHeaders(
  headers: Readonly<Record<string, string>>,
  state: { origin: Origin; group: string; attempts: number; retryRound: number; notBefore: number; error: string },
): Record<string, string> {
  return {
    ...carriedHeaders(headers),
    ...originHeaders(state.origin, state.group),
    [HEADERS.attempts]: String(state.attempts),
    [HEADERS.retryRound]: String(state.retryRound),
    [HEADERS.notBefore]: String(state.notBefore),
    [HEADERS.error]: truncateError(state.error),
  };
}

export function deadLetterHeaders(
  headers: Readonly<Record<string, string>>,
  state: { origin: Origin; group: string; attempts: number; reason: DeadLetterReason; error: string; failedAt: number },
): Record<string, string> {
  return {
    ...carriedHeaders(headers),
    ...originHeaders(state.origin, state.group),
    [HEADERS.attempts]: String(state.attempts),
    [HEADERS.reason]: state.reason,
    [HEADERS.error]: truncateError(state.error),
    [HEADERS.failedAt]: String(state.failedAt),
  };
}
