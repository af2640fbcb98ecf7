import type { MessageBus, SubscribeOptions, Subscription } from '@anvil/messaging';
import type { Logger } from '@anvil/observability';
import type { ReadinessRegistry } from './readiness';

/**
 * The one reconnect backoff of the services: 250 ms per failed attempt, capped at 5 s
 * (attempt 1 -> 250 ms, 2 -> 500 ms, ..., 20 and later -> 5 s).
 */
export function retryDelayMs(attempt: number, options: { stepMs?: number; maxMs?: number } = {}): number {
  const stepMs = options.stepMs ?? 250;
  const maxMs = options.maxMs ?? 5_000;
  return Math.min(maxMs, stepMs * Math.max(1, Math.floor(attempt)));
}

/** Resolves after `ms`, or at once when `signal` aborts (never rejects). */
export function sleepUnlessAborted(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

export interface BackgroundStartOptions<T> {
  /** Readiness check name and log label, e.g. 'data-pool'. */
  name: string;
  logger: Logger;
  /** When given, a check `name` that fails until `start` has succeeded. */
  readiness?: ReadinessRegistry;
  /**
   * Runs before each attempt (open the database, run migrations, wait for a schema): an error
   * is logged and retried with the backoff. `signal` aborts on stop, and stop does not wait for it.
   */
  prepare?: (signal: AbortSignal) => Promise<void>;
  /** One attempt to start (join a group, start a runtime): an error is logged and retried. */
  start: () => Promise<T>;
  /** Stops what `start` returned: on stop(), and at once for an attempt that succeeds after stop() was called. */
  stop: (started: T) => Promise<void>;
  /** Log fields once started. */
  describe?: (started: T) => Record<string, unknown>;
  /** Delay before attempt n+1 after n failures. Default `retryDelayMs`. */
  backoff?: (attempt: number) => number;
  /** How long stop() waits for a `start` in flight. Default 10 s. */
  stopTimeoutMs?: number;
}

/**
 * Starts something in the background and keeps trying until it has started, so a service
 * answers /healthz (and an honest /readyz) while its broker and database come up. `stop()`
 * is safe at any moment: before `start()`, during `prepare` (aborted, not waited for), while
 * `start` is still running (waited for up to `stopTimeoutMs`; what it returns later is
 * stopped as soon as it exists, and no further attempt is made), during the backoff sleep
 * (cut short), or after it started.
 */
export class BackgroundStart<T> {
  private value: { started: T } | null = null;
  private readonly abort = new AbortController();
  private loop: Promise<void> | null = null;
  /** The `start` call in flight, if any: stop() waits for it (bounded). */
  private starting: Promise<unknown> | null = null;
  private startedResolve!: () => void;
  private readonly startedPromise = new Promise<void>((resolve) => (this.startedResolve = resolve));
  private attempts = 0;
  private lastError: unknown = null;

  constructor(private readonly options: BackgroundStartOptions<T>) {
    options.readiness?.add({
      name: options.name,
      check: async () => {
        if (this.value) return;
        const why = this.lastError instanceof Error ? `: ${this.lastError.message}` : '';
        throw new Error(`${options.name} not started yet${why}`);
      },
    });
  }

  /** Starts the loop (idempotent) and returns at once. */
  run(): this {
    if (!this.loop && !this.abort.signal.aborted) this.loop = this.attemptUntilStarted();
    return this;
  }

  /** What `start` returned, once it has. */
  get current(): T | null {
    return this.value ? this.value.started : null;
  }

  get isStarted(): boolean {
    return this.value !== null;
  }

  /** Failed attempts so far. */
  get failedAttempts(): number {
    return this.attempts;
  }

  /** Resolves once started (never, if stopped first). */
  whenStarted(): Promise<void> {
    return this.startedPromise;
  }

  private async attemptUntilStarted(): Promise<void> {
    const { logger, name } = this.options;
    const backoff = this.options.backoff ?? retryDelayMs;
    const signal = this.abort.signal;
    while (!signal.aborted) {
      try {
        await this.options.prepare?.(signal);
        if (signal.aborted) return;
        const starting = this.options.start();
        this.starting = starting.catch(() => undefined);
        const started = await starting.finally(() => (this.starting = null));
        if (signal.aborted) {
          // Stopped while starting: stop it at once instead of running for a service that is going away.
          await this.options.stop(started);
          return;
        }
        this.value = { started };
        this.lastError = null;
        logger.info(`${name} started`, this.options.describe?.(started) ?? {});
        this.startedResolve();
        return;
      } catch (err) {
        if (signal.aborted) return;
        this.attempts++;
        this.lastError = err;
        logger.warn(`${name} not started yet; retrying`, { attempt: this.attempts, err });
        await sleepUnlessAborted(backoff(this.attempts), signal);
      }
    }
  }

  /** Stops retrying, then stops what was started (see the class comment). Idempotent. */
  async stop(): Promise<void> {
    this.abort.abort();
    if (this.starting) {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, this.options.stopTimeoutMs ?? 10_000)));
      await Promise.race([this.loop, deadline]).finally(() => clearTimeout(timer));
    }
    const value = this.value;
    this.value = null;
    if (value) await this.options.stop(value.started);
  }
}

export interface BackgroundSubscriptionOptions {
  /** Readiness check name and log label, e.g. 'policy-versions'. */
  name: string;
  bus: MessageBus;
  logger: Logger;
  /** When given, a check `name` that fails until the subscription has joined its group. */
  readiness?: ReadinessRegistry;
  /**
   * Runs before each attempt to subscribe (open the database, run migrations, wait for a
   * schema): an error is logged and retried with the same backoff. `signal` aborts on stop.
   */
  prepare?: (signal: AbortSignal) => Promise<void>;
  /** What to subscribe with; a function is called once per attempt (after `prepare`). */
  subscribe: SubscribeOptions | (() => SubscribeOptions);
  /** Delay before attempt n+1 after n failures. Default `retryDelayMs`. */
  backoff?: (attempt: number) => number;
  /** How long stop() waits for a bus.subscribe in flight, and `Subscription.stop`'s deadline. Default 10 s. */
  stopTimeoutMs?: number;
}

/**
 * A BackgroundStart whose attempt is `bus.subscribe`: joins the group in the background,
 * readiness until it has joined, leaves the group on stop (committing what was handled),
 * a member that joins after stop() is left at once.
 */
export class BackgroundSubscription {
  private readonly task: BackgroundStart<Subscription>;

  constructor(options: BackgroundSubscriptionOptions) {
    const stopTimeoutMs = options.stopTimeoutMs ?? 10_000;
    this.task = new BackgroundStart<Subscription>({
      name: options.name,
      logger: options.logger,
      readiness: options.readiness,
      prepare: options.prepare,
      backoff: options.backoff,
      stopTimeoutMs,
      start: () => options.bus.subscribe(typeof options.subscribe === 'function' ? options.subscribe() : options.subscribe),
      stop: (subscription) => subscription.stop({ timeoutMs: stopTimeoutMs }),
      describe: (subscription) => ({ group: subscription.group, topics: subscription.topics }),
    });
  }

  /** Starts the loop (idempotent) and returns at once. */
  start(): this {
    this.task.run();
    return this;
  }

  get subscribed(): boolean {
    return this.task.isStarted;
  }

  /** Failed attempts so far. */
  get failedAttempts(): number {
    return this.task.failedAttempts;
  }

  /** Resolves once the subscription has joined (never, if it is stopped first). */
  whenSubscribed(): Promise<void> {
    return this.task.whenStarted();
  }

  /** Stops retrying and leaves the group. Idempotent. */
  stop(): Promise<void> {
    return this.task.stop();
  }
}
