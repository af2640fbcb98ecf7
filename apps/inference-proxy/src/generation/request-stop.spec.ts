import { describe, expect, it, vi } from 'vitest';
import { RequestStop } from './request-stop';

describe('RequestStop', () => {
  it('aborts the running attempt, and a later attempt at once', () => {
    const stop = new RequestStop();
    const first = stop.beginAttempt();
    expect(first.signal.aborted).toBe(false);
    stop.abort();
    expect(stop.aborted).toBe(true);
    expect(first.signal.aborted).toBe(true);
    expect(stop.beginAttempt().signal.aborted).toBe(true);
  });

  it('leaves an ended attempt alone', () => {
    const stop = new RequestStop();
    const attempt = stop.beginAttempt();
    stop.endAttempt(attempt);
    stop.abort();
    expect(attempt.signal.aborted).toBe(false);
  });

  it('gives a request-wide signal that aborts with it (already aborted when made after)', () => {
    const stop = new RequestStop();
    const signal = stop.signal;
    expect(signal.aborted).toBe(false);
    stop.abort();
    expect(signal.aborted).toBe(true);
    const late = new RequestStop();
    late.abort();
    expect(late.signal.aborted).toBe(true);
  });

  it('aborts at its deadline unless disposed first', () => {
    vi.useFakeTimers();
    try {
      const timed = new RequestStop();
      timed.arm(50);
      const disposed = new RequestStop();
      disposed.arm(50);
      disposed.dispose();
      vi.advanceTimersByTime(49);
      expect(timed.aborted).toBe(false);
      vi.advanceTimersByTime(1);
      expect(timed.aborted).toBe(true);
      expect(disposed.aborted).toBe(false);
      const unarmed = new RequestStop();
      unarmed.arm(0);
      vi.advanceTimersByTime(1_000);
      expect(unarmed.aborted).toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });
});
