import { describe, expect, it } from 'vitest';
import { SessionLock, SessionLockTimeoutError } from './session-lock';

describe('SessionLock', () => {
  it('grants the session in request order, one holder at a time', async () => {
    const lock = new SessionLock();
    const order: number[] = [];
    let holders = 0;
    await Promise.all(
      [0, 1, 2, 3, 4].map(async (i) => {
        const release = await lock.acquire();
        holders += 1;
        expect(holders).toBe(1);
        order.push(i);
        await new Promise((r) => setTimeout(r, 5 - i));
        holders -= 1;
        release();
      }),
    );
    expect(order).toEqual([0, 1, 2, 3, 4]);
    expect(lock.held).toBe(false);
  });

  it('times a waiter out without disturbing the queue behind it', async () => {
    const lock = new SessionLock();
    const release = await lock.acquire();
    const impatient = lock.acquire(20);
    const patient = lock.acquire();
    await expect(impatient).rejects.toBeInstanceOf(SessionLockTimeoutError);
    expect(lock.waiting).toBe(1);
    release();
    const next = await patient;
    expect(lock.held).toBe(true);
    next();
    next(); // a second call is a no-op, not a second release
    expect(lock.held).toBe(false);
  });
});
