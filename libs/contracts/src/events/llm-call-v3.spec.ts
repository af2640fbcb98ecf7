import { describe, expect, it } from 'vitest';
import { createEventAt, decodeEvent, encodeEvent } from '../envelope';
import { EVENTS } from './registry';
import { sampleLlmCallEvent } from '../testing';

/** llm_call.recorded v3: v2 + the per-token constrained-decoding marks (additive; v2 stays readable). */
describe('llm_call.recorded v3 (outputConstraint)', () => {
  it('is the current version and carries the marks bit-exactly through a frame', () => {
    expect(EVENTS['llm_call.recorded'].current).toBe(3);
    const event = sampleLlmCallEvent({ promptTokens: 4, outputTokens: 3 });
    event.payload.outputConstraint = Uint8Array.from([1, 2, 1]);
    const decoded = decodeEvent(encodeEvent(event));
    if (decoded.type !== 'llm_call.recorded' || decoded.version !== 3) throw new Error('wrong type');
    expect(decoded.payload.outputConstraint).toEqual(Uint8Array.from([1, 2, 1]));
  });

  it('without marks (nothing constrained) it is a v2 payload; marks of another length are refused', () => {
    const event = sampleLlmCallEvent({ promptTokens: 4, outputTokens: 3 });
    expect(EVENTS['llm_call.recorded'].versions[3].safeParse(event.payload).success).toBe(true);
    const v2 = createEventAt('llm_call.recorded', 2, event.payload, { key: event.key, producer: 'test' });
    expect(decodeEvent(encodeEvent(v2)).version).toBe(2);
    const bad = EVENTS['llm_call.recorded'].versions[3].safeParse({ ...event.payload, outputConstraint: Uint8Array.from([1]) });
    expect(bad.success).toBe(false);
    expect(JSON.stringify(bad.error?.issues)).toMatch(/one entry per output id/);
  });
});
