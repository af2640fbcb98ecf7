/**
 * A FIFO mutex over the single PGlite session. PGlite runs one Postgres backend, so a
 * transaction is a property of the session, not of a "connection": whoever holds this lock
 * owns BEGIN..COMMIT and everybody else (transactional or not) queues behind it.
 */
export class SessionLockTimeoutError extends Error {
  constructor(waitedMs: number) {
    super(
      `waited ${waitedMs} ms for the PGlite session: another query runner holds it. ` +
        'PGlite has one session, so code inside a transaction must use that transaction’s ' +
        'EntityManager, never the DataSource (that would wait for itself).',
    );
    this.name = 'SessionLockTimeoutError';
  }
}

interface Waiter {
  grant: (release: () => void) => void;
}

export class SessionLock {
  #held = false;
  readonly #queue: Waiter[] = [];

  get held(): boolean {
    return this.#held;
  }

  get waiting(): number {
    return this.#queue.length;
  }

  /** Resolves with a one-shot release function; timeoutMs <= 0 waits forever. */
  acquire(timeoutMs = 0): Promise<() => void> {
    if (!this.#held) {
      this.#held = true;
      return Promise.resolve(this.#releaser());
    }
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const waiter: Waiter = {
        grant: (release) => {
          if (timer) clearTimeout(timer);
          resolve(release);
        },
      };
      if (timeoutMs > 0) {
        timer = setTimeout(() => {
          const at = this.#queue.indexOf(waiter);
          if (at >= 0) this.#queue.splice(at, 1);
          reject(new SessionLockTimeoutError(timeoutMs));
        }, timeoutMs);
      }
      this.#queue.push(waiter);
    });
  }

  #releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      // Hand the session straight to the next waiter so nobody can barge in between.
      const next = this.#queue.shift();
      if (next) next.grant(this.#releaser());
      else this.#held = false;
    };
  }
}
