import { describe, expect, it } from 'vitest';
import { linkAbort, TimeoutError } from './linked-abort';

describe('linkAbort', () => {
  it('aborts when any source does, with its reason', () => {
    const a = new AbortController();
    const b = new AbortController();
    const linked = linkAbort([a.signal, undefined, b.signal]);
    expect(linked.signal.aborted).toBe(false);
    b.abort('why');
    expect(linked.signal.aborted).toBe(true);
    expect(linked.signal.reason).toBe('why');
  });

  it('starts aborted when a source already is', () => {
    const a = new AbortController();
    a.abort('before');
    expect(linkAbort([a.signal]).signal.reason).toBe('before');
  });

  it('aborts at the deadline with a TimeoutError', async () => {
    const linked = linkAbort([], 5);
    await new Promise((r) => setTimeout(r, 20));
    expect(linked.signal.reason).toBeInstanceOf(TimeoutError);
  });

  it('after dispose, neither sources nor the deadline abort it', async () => {
    const a = new AbortController();
    const linked = linkAbort([a.signal], 5);
    linked.dispose();
    a.abort();
    await new Promise((r) => setTimeout(r, 20));
    expect(linked.signal.aborted).toBe(false);
  });
});
