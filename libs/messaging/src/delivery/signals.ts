/**
 * Two ways a delivery is cut short. `stop` (graceful shutdown, partition revoked) interrupts
 * waits — backoff, retry-topic delay — but lets a running handler finish. `abandon` (stop
 * deadline passed, crash simulation) also stops waiting for the handler. Either way the message
 * is left uncommitted for the group's next member.
 */
export interface DeliverySignals {
  stop: AbortSignal;
  abandon: AbortSignal;
}

/** Resolves true after `ms`, or false as soon as `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  if (ms <= 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

export type Settled<T> = { status: 'ok'; value: T } | { status: 'failed'; error: unknown } | { status: 'abandoned' };

/** Runs `fn`, but stops waiting for it when `signal` aborts (the promise itself runs on). */
export function settleUnlessAbandoned<T>(fn: () => Promise<T>, signal: AbortSignal): Promise<Settled<T>> {
  if (signal.aborted) return Promise.resolve({ status: 'abandoned' });
  return new Promise((resolve) => {
    const onAbort = () => resolve({ status: 'abandoned' });
    signal.addEventListener('abort', onAbort, { once: true });
    Promise.resolve()
      .then(fn)
      .then(
        (value) => resolve({ status: 'ok', value }),
        (error: unknown) => resolve({ status: 'failed', error }),
      )
      .finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** Calls `beat` every `intervalMs` until the returned function is called (Kafka heartbeats). */
export function startKeepAlive(keepAlive: KeepAlive | undefined): () => void {
  if (!keepAlive) return () => undefined;
  const timer = setInterval(() => {
    keepAlive.beat().catch(() => {
      // A failed heartbeat means the group is rebalancing; the commit after the handler will
      // fail the same way and kafkajs rejoins. Nothing to do here.
    });
  }, keepAlive.intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

export interface KeepAlive {
  intervalMs: number;
  beat(): Promise<void>;
}
