import type { DeliveryOptions } from '../bus';

/** DeliveryOptions with defaults applied and checked once, at subscribe time. */
export interface DeliveryPolicy {
  maxAttempts: number;
  retryDelayMs: number;
  maxRetryDelayMs: number;
  retryTopicDelayMs: number;
  retryRounds: number;
  concurrency: number;
  fromBeginning: boolean;
}

// The defaults that DeliveryOptions documents (bus.ts): a change here changes those comments.
const DEFAULTS = {
  maxAttempts: 3,
  retryDelayMs: 200,
  // Kafka: the partition (and, at concurrency 1, the whole member) waits during backoff.
  maxRetryDelayMs: 30_000,
  retryTopicDelayMs: 5_000,
  retryRounds: 1,
  concurrency: 1,
  fromBeginning: false,
} as const;

export function resolveDeliveryPolicy(options: DeliveryOptions): DeliveryPolicy {
  const policy: DeliveryPolicy = {
    maxAttempts: options.maxAttempts ?? DEFAULTS.maxAttempts,
    retryDelayMs: options.retryDelayMs ?? DEFAULTS.retryDelayMs,
    maxRetryDelayMs: DEFAULTS.maxRetryDelayMs,
    retryTopicDelayMs: options.retryTopicDelayMs ?? DEFAULTS.retryTopicDelayMs,
    retryRounds: options.retryRounds ?? DEFAULTS.retryRounds,
    concurrency: options.concurrency ?? DEFAULTS.concurrency,
    fromBeginning: options.fromBeginning ?? DEFAULTS.fromBeginning,
  };
  const positiveInt = (name: keyof DeliveryPolicy, min: number) => {
    const v = policy[name];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min)
      throw new Error(`${name} must be an integer >= ${min} (got ${String(v)})`);
  };
  positiveInt('maxAttempts', 1);
  positiveInt('retryDelayMs', 0);
  positiveInt('retryTopicDelayMs', 0);
  positiveInt('retryRounds', 0);
  positiveInt('concurrency', 1);
  return policy;
}

/** Wait before in-process attempt `failedAttempts + 1`: retryDelayMs, doubling, capped. */
export function backoffMs(policy: DeliveryPolicy, failedAttempts: number): number {
  return Math.min(policy.retryDelayMs * 2 ** Math.max(0, failedAttempts - 1), policy.maxRetryDelayMs);
}
