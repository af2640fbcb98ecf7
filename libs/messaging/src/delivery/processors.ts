import { decodeEvent, type AnyEventEnvelope } from '@anvil/contracts';
import type { EventBatchHandler, EventHandler, RawHandler, RawRecord } from '../bus';
import type { Processor } from './deliver';

const EMPTY = Buffer.alloc(0);

/** subscribe(): the ANV1 codec decides what is poison (its ContractError reason goes to the DLQ). */
export function eventProcessor(
  handler: EventHandler,
  batch?: { handler?: EventBatchHandler; maxSize?: number },
): Processor<AnyEventEnvelope> {
  return {
    // A tombstone (null value) is not a frame: decodeEvent reports malformed_frame.
    decode: (record) => decodeEvent(record.value ?? EMPTY),
    handle: handler,
    handleBatch: batch?.handler,
    maxBatchSize: batch?.maxSize,
  };
}

/** subscribeRaw(): nothing is poison; the handler gets its own copy of the bytes. */
export function rawProcessor(handler: RawHandler): Processor<RawRecord> {
  return {
    decode: (record) => ({ key: record.key, value: record.value ? Buffer.from(record.value) : null, headers: record.headers }),
    handle: handler,
  };
}
