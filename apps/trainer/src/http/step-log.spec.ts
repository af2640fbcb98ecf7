import { describe, expect, it } from 'vitest';
import type { TrainerStepEvent } from '../runtime';
import { StepLog } from './step-log';

const step = (version: number) => ({ version, batchStep: version - 1 }) as TrainerStepEvent;

describe('StepLog', () => {
  it('numbers steps from 1 and returns those after a sequence number, oldest first, up to a limit', () => {
    const log = new StepLog();
    expect(log.since(0)).toEqual({ steps: [], lastSeq: 0, missed: 0 });
    for (let v = 1; v <= 5; v++) log.push(step(v), 1000 + v);
    const r = log.since(2, 2);
    expect(r.steps.map((s) => [s.seq, s.at, s.event.version])).toEqual([
      [3, 1003, 3],
      [4, 1004, 4],
    ]);
    expect(r.lastSeq).toBe(5);
    expect(r.missed).toBe(0);
    expect(log.since(5).steps).toEqual([]);
  });

  it('forgets the oldest past its capacity and tells a reader that fell behind how many it missed', () => {
    const log = new StepLog(3);
    for (let v = 1; v <= 7; v++) log.push(step(v));
    const behind = log.since(1);
    expect(behind.steps.map((s) => s.seq)).toEqual([5, 6, 7]);
    expect(behind.missed).toBe(3); // 2, 3 and 4 are gone
    expect(log.since(4).missed).toBe(0);
    expect(log.since(6).steps.map((s) => s.seq)).toEqual([7]);
  });

  it('refuses a capacity that is not a positive integer', () => {
    expect(() => new StepLog(0)).toThrow(RangeError);
    expect(() => new StepLog(1.5)).toThrow(/capacity/);
  });
});
