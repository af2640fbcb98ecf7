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

export interface BackgroundSubscriptionOptions {
  /** Readiness check name and log label, e.g. 'data-pool-consumer'. */
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
  /** Passed to `Subscription.stop` on stop. Default 10 s. */
  stopTimeoutMs?: number;
}

/**
 * Subscribes in the background and keeps trying until it has joined, so a service answers
 * /healthz (and an honest /readyz) while its broker and database come up. `stop()` is safe
 * at any moment: before `start()`, while `prepare` or `bus.subscribe` is still running (the
 * subscription that attempt returns is stopped as soon as it exists, and no further attempt
 * is made), during the backoff sleep (cut short), or after it joined.
 */
export class BackgroundSubscription {
  private subscription: Subscription | null = null;
  private readonly abort = new AbortController();
  private loop: Promise<void> | null = null;
  /** The bus.subscribe call in flight, if any: stop() waits for it (bounded). */
  private joining: Promise<unknown> | null = null;
  private joinedResolve!: () => void;
  private readonly joined = new Promise<void>((resolve) => (this.joinedResolve = resolve));
  private attempts = 0;
  private lastError: unknown = null;

  constructor(private readonly options: BackgroundSubscriptionOptions) {
    options.readiness?.add({
      name: options.name,
      check: async () => {
        if (this.subscription) return;
        const why = this.lastError instanceof Error ? `: ${this.lastError.message}` : '';
        throw new Error(`${options.name} not subscribed yet${why}`);
      },
    });
  }

  /** Starts the loop (idempotent) and returns at once. */
  start(): this {
    if (!this.loop && !this.abort.signal.aborted) this.loop = this.run();
    return this;
  }

  get subscribed(): boolean {
    return this.subscription !== null;
  }

  /** Failed attempts so far. */
  get failedAttempts(): number {
    return this.attempts;
  }

  /** Resolves once the subscription has joined (never, if it is stopped first). */
  whenSubscribed(): Promise<void> {
    return this.joined;
  }

  private async run(): Promise<void> {
    const { bus, logger, name } = this.options;
    const backoff = this.options.backoff ?? retryDelayMs;
    const signal = this.abort.signal;
    while (!signal.aborted) {
      try {
        await this.options.prepare?.(signal);
        if (signal.aborted) return;
        const subscribeOptions = typeof this.options.subscribe === 'function' ? this.options.subscribe() : this.options.subscribe;
        const joining = bus.subscribe(subscribeOptions);
        this.joining = joining.catch(() => undefined);
        const subscription = await joining.finally(() => (this.joining = null));
        if (signal.aborted) {
          // Stopped while joining: leave at once instead of consuming for a service that is going away.
          await subscription.stop({ timeoutMs: this.options.stopTimeoutMs ?? 10_000 });
          return;
        }
        this.subscription = subscription;
        this.lastError = null;
        logger.info(`${name} subscribed`, { group: subscription.group, topics: subscription.topics });
        this.joinedResolve();
        return;
      } catch (err) {
        if (signal.aborted) return;
        this.attempts++;
        this.lastError = err;
        logger.warn(`${name} not connected yet; retrying`, { attempt: this.attempts, err });
        await sleepUnlessAborted(backoff(this.attempts), signal);
      }
    }
  }

  /**
   * Stops retrying and leaves the group (committing what was handled). A `prepare` in flight
   * is not waited for (it sees the aborted signal); a `bus.subscribe` in flight is waited for
   * up to `stopTimeoutMs`, and if it returns later still, the loop stops that subscription
   * itself, so nothing keeps consuming. Idempotent.
   */
  async stop(): Promise<void> {
    this.abort.abort();
    if (this.joining) {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, this.options.stopTimeoutMs ?? 10_000)));
      await Promise.race([this.loop, deadline]).finally(() => clearTimeout(timer));
    }
    const subscription = this.subscription;
    this.subscription = null;
    await subscription?.stop({ timeoutMs: this.options.stopTimeoutMs ?? 10_000 });
  }
}
