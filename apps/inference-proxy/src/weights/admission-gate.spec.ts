import { describe, expect, it } from 'vitest';
import { ActiveAttempts } from '../generation/active-attempts';
import { AdmissionGate } from './admission-gate';

describe('AdmissionGate', () => {
  it('makes callers wait while closed and releases them all on open', async () => {
    const gate = new AdmissionGate();
    await gate.wait();
    gate.close('swap');
    let released = 0;
    const waits = [gate.wait().then(() => released++), gate.wait().then(() => released++)];
    await Promise.resolve();
    expect(released).toBe(0);
    expect(gate.waiting).toBe(2);
    gate.open();
    await Promise.all(waits);
    expect(released).toBe(2);
  });

  it('lets a waiting caller give up', async () => {
    const gate = new AdmissionGate();
    gate.close('swap');
    const controller = new AbortController();
    const w = gate.wait(controller.signal);
    controller.abort(new Error('client left'));
    await expect(w).rejects.toThrow('client left');
    expect(gate.waiting).toBe(0);
  });
});

describe('ActiveAttempts', () => {
  it('reports idle when the last attempt ends, and times out otherwise', async () => {
    const active = new ActiveAttempts();
    let interrupted = 0;
    const a = { replicaId: 'r', interruptForSwap: () => interrupted++ };
    active.add(a);
    expect(await active.whenIdle(10)).toBe(false);
    const idle = active.whenIdle();
    expect(active.interruptAll()).toBe(1);
    expect(interrupted).toBe(1);
    active.remove(a);
    expect(await idle).toBe(true);
  });
});
