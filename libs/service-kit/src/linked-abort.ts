/**
 * One AbortSignal that aborts when any of `sources` does or after `timeoutMs`, with a dispose()
 * that detaches it again. AbortSignal.any() and AbortSignal.timeout() do the same, but cost
 * far more per call (weak-reference bookkeeping, a DOMException with a stack trace per
 * timeout) on paths that run several times per request; and nothing here outlives the request
 * once dispose() has run.
 */
export interface LinkedAbort {
  readonly signal: AbortSignal;
  dispose(): void;
}

export function linkAbort(sources: readonly (AbortSignal | undefined)[], timeoutMs?: number): LinkedAbort {
  const controller = new AbortController();
  const present = sources.filter((s): s is AbortSignal => s !== undefined);
  const already = present.find((s) => s.aborted);
  if (already) {
    controller.abort(already.reason);
    return { signal: controller.signal, dispose: () => undefined };
  }
  const listeners = present.map((s) => {
    const onAbort = () => controller.abort(s.reason);
    s.addEventListener('abort', onAbort, { once: true });
    return () => s.removeEventListener('abort', onAbort);
  });
  const timer =
    timeoutMs !== undefined && timeoutMs > 0 ? setTimeout(() => controller.abort(new TimeoutError(timeoutMs)), timeoutMs) : undefined;
  timer?.unref();
  let disposed = false;
  const dispose = () => {
    if (disposed) return;
    disposed = true;
    if (timer) clearTimeout(timer);
    for (const off of listeners) off();
  };
  controller.signal.addEventListener('abort', dispose, { once: true });
  return { signal: controller.signal, dispose };
}

/** The abort reason of a linkAbort deadline (name 'TimeoutError', as AbortSignal.timeout's). */
export class TimeoutError extends Error {
  override readonly name = 'TimeoutError';
  constructor(readonly timeoutMs: number) {
    super(`deadline of ${timeoutMs} ms exceeded`);
  }
}
