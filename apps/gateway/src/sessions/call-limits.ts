import { GatewayError } from '../errors';

/**
 * A session's call limits as stored on its row (null: none): a budget of calls answered, and a
 * rate limit as a token bucket of `callBurst` tokens refilled at `callsPerSecond`, one token per
 * call (each choice of an n > 1 request is a call).
 */
export interface CallLimits {
  maxCalls: number | null;
  callsPerSecond: number | null;
  callBurst: number | null;
}

export const NO_CALL_LIMITS: CallLimits = { maxCalls: null, callsPerSecond: null, callBurst: null };

/** The limits a create-session request asks for, checked; the burst defaults to one second's worth of calls (at least one). */
export function callLimitsOf(r: { maxCalls?: number; callsPerSecond?: number; callBurst?: number }): CallLimits {
  if (r.callBurst !== undefined && r.callsPerSecond === undefined)
    throw GatewayError.invalid("callBurst needs callsPerSecond (the burst is the size of the rate limit's bucket)", 'callBurst');
  return {
    maxCalls: r.maxCalls ?? null,
    callsPerSecond: r.callsPerSecond ?? null,
    callBurst: r.callsPerSecond === undefined ? null : (r.callBurst ?? Math.max(1, Math.ceil(r.callsPerSecond))),
  };
}

export const hasCallLimits = (l: CallLimits): boolean => l.maxCalls !== null || l.callsPerSecond !== null;

/** How long until a bucket holding `tokens`, refilled at `perSecond`, holds `n` (ms). */
export function refillWaitMs(tokens: number, n: number, perSecond: number): number {
  return Math.max(0, ((n - tokens) / perSecond) * 1000);
}

/** What the gate decided for one request. */
export type LimitDecision =
  | { admitted: true }
  | { admitted: false; reason: 'budget'; maxCalls: number; callsAdmitted: number; n: number }
  | { admitted: false; reason: 'rate'; waitMs: number; callsPerSecond: number; callBurst: number };

/**
 * The 429 of a call over its session's budget. OpenAI's quota error (type and code
 * `insufficient_quota`), which agents such as Codex CLI treat as final, and `x-should-retry:
 * false`, which the official OpenAI and Anthropic SDKs obey: retrying cannot help, the budget
 * does not come back. No Retry-After for the same reason.
 */
export function budgetSpentError(d: { maxCalls: number; callsAdmitted: number; n: number }): GatewayError {
  const left = Math.max(0, d.maxCalls - d.callsAdmitted);
  const asked = d.n === 1 ? '' : ` (this request asks for ${d.n} choices; ${left} ${left === 1 ? 'call is' : 'calls are'} left)`;
  return new GatewayError(
    'over_limit',
    `this session's call budget is spent: it may make ${d.maxCalls} LLM calls${asked}; the rollout ends here`,
    'insufficient_quota',
    null,
    undefined,
    { type: 'insufficient_quota', headers: { 'x-should-retry': 'false' } },
  );
}

/**
 * The 429 of a call over its session's rate limit, with when to come back: Retry-After in whole
 * seconds (HTTP's unit, at least 1) and retry-after-ms, which the official SDKs read first.
 */
export function rateLimitedError(d: { waitMs: number; callsPerSecond: number; callBurst: number }): GatewayError {
  const ms = Math.max(1, Math.ceil(d.waitMs));
  return new GatewayError(
    'over_limit',
    `this session is over its rate limit of ${d.callsPerSecond} calls per second (bursts of ${d.callBurst}); retry after ${ms} ms`,
    'rate_limit_exceeded',
    null,
    Math.max(1, Math.ceil(ms / 1000)),
    { headers: { 'retry-after-ms': String(ms) } },
  );
}
