import { describe, expect, it } from 'vitest';
import {
  carriedHeaders,
  deadLetterHeaders,
  ERROR_HEADER_LIMIT,
  HEADERS,
  normalizeHeaders,
  readDeliveryState,
  retryHeaders,
} from './headers';

const origin = { topic: 'anvil.rollouts.v1', partition: 2, offset: '41' };

describe('delivery headers', () => {
  it('normalizes kafkajs header values to strings, first value of a repeated key', () => {
    expect(normalizeHeaders({ a: Buffer.from('x'), b: 'y', c: [Buffer.from('1'), Buffer.from('2')], d: undefined })).toEqual({
      a: 'x',
      b: 'y',
      c: '1',
    });
    expect(normalizeHeaders(undefined)).toEqual({});
  });

  it('carries a message through retry and DLQ copies without accumulating bookkeeping', () => {
    const published = { traceparent: '00-aa-bb-01', [HEADERS.eventId]: 'e1' };
    const retry = retryHeaders(published, { origin, group: 'mw', attempts: 3, retryRound: 1, notBefore: 1234, error: 'boom' });
    expect(readDeliveryState(retry, true, { topic: 'x', partition: 0, offset: '0' })).toEqual({
      origin,
      attemptsSoFar: 3,
      retryRound: 1,
      notBefore: 1234,
    });
    const dead = deadLetterHeaders(retry, {
      origin,
      group: 'mw',
      attempts: 6,
      reason: 'handler_failed',
      error: 'boom again',
      failedAt: 99,
    });
    expect(dead).toEqual({
      ...published,
      [HEADERS.group]: 'mw',
      [HEADERS.originalTopic]: origin.topic,
      [HEADERS.originalPartition]: '2',
      [HEADERS.originalOffset]: '41',
      [HEADERS.attempts]: '6',
      [HEADERS.reason]: 'handler_failed',
      [HEADERS.error]: 'boom again',
      [HEADERS.failedAt]: '99',
    });
    expect(carriedHeaders(dead)).toEqual(published);
  });

  it('treats a fresh message as attempt 0 at its own location, whatever its headers claim', () => {
    const spoofed = { [HEADERS.attempts]: '7', [HEADERS.originalTopic]: 'elsewhere' };
    expect(readDeliveryState(spoofed, false, origin)).toEqual({ origin, attemptsSoFar: 0, retryRound: 0, notBefore: 0 });
  });

  it('falls back to the copy itself when a retry copy lacks its origin', () => {
    expect(readDeliveryState({ [HEADERS.attempts]: 'junk' }, true, origin)).toEqual({
      origin,
      attemptsSoFar: 0,
      retryRound: 0,
      notBefore: 0,
    });
  });

  it('truncates long error messages', () => {
    const dead = deadLetterHeaders(
      {},
      { origin, group: 'g', attempts: 1, reason: 'handler_failed', error: 'x'.repeat(100_000), failedAt: 0 },
    );
    expect(dead[HEADERS.error].length).toBeLessThanOrEqual(ERROR_HEADER_LIMIT);
    expect(dead[HEADERS.error].endsWith('[truncated]')).toBe(true);
  });
});
