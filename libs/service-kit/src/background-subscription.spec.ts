import { afterEach, describe, expect, it } from 'vitest';
import { TOPICS, createEvent, type AnyEventEnvelope } from '@anvil/contracts';
import { MemoryBroker, MemoryBus, silentLogger, type MessageBus, type SubscribeOptions, type Subscription } from '@anvil/messaging';
import { createLogger } from '@anvil/observability';
import { BackgroundStart, BackgroundSubscription, retryDelayMs, sleepUnlessAborted } from './background-subscription';
import { ReadinessRegistry } from './readiness';

const logger = createLogger({ service: 'test', level: 'error' });

function activation(version: number): AnyEventEnvelope {
  return createEvent(
    'policy_version.activated',
    { version, deployment: 'default', swapPolicy: 'drain-then-swap', activatedAt: Date.now() },
    { key: 'default', producer: 'test' },
  ) as AnyEventEnvelope;
}

/**
 * A real in-process bus whose broker is "down" for the first `failures` subscribe calls, and
 * whose subscribe can be held open (a broker that accepts the connection but is slow to
 * assign partitions), to drive the helper through the states it must survive.
 */
class FlakyBus {
  calls = 0;
  hold: Promise<void> | null = null;
  readonly joined: Subscription[] = [];
  constructor(
    readonly inner: MessageBus,
    private failures: number,
  ) {}
  readonly subscribe = async (options: SubscribeOptions): Promise<Subscription> => {
    this.calls++;
    if (this.failures > 0) {
      this.failures--;
      throw new Error('ECONNREFUSED broker');
    }
    if (this.hold) await this.hold;
    const sub = await this.inner.subscribe(options);
    this.joined.push(sub);
    return sub;
  };
  asBus(): MessageBus {
    return new Proxy(this.inner, { get: (t, p) => (p === 'subscribe' ? this.subscribe : Reflect.get(t, p)) });
  }
}

describe('retryDelayMs', () => {
  it('grows 250 ms per attempt and caps at 5 s', () => {
    expect([1, 2, 3, 10, 20, 21, 1000].map((a) => retryDelayMs(a))).toEqual([250, 500, 750, 2500, 5000, 5000, 5000]);
    expect(retryDelayMs(0)).toBe(250);
    expect(retryDelayMs(3, { stepMs: 10, maxMs: 25 })).toBe(25);
  });

  it('sleepUnlessAborted returns as soon as the signal aborts', async () => {
    const ac = new AbortController();
    const started = Date.now();
    setTimeout(() => ac.abort(), 20);
    await sleepUnlessAborted(10_000, ac.signal);
    expect(Date.now() - started).toBeLessThan(2_000);
  });
});

describe('BackgroundSubscription', () => {
  const buses: MessageBus[] = [];
  const newBus = () => {
    const bus = new MemoryBus({ broker: new MemoryBroker(), logger: silentLogger });
    buses.push(bus);
    return bus;
  };
  afterEach(async () => {
    await Promise.all(buses.splice(0).map((b) => b.close()));
  });

  it('retries with backoff until the broker answers, reports readiness honestly, then delivers', async () => {
    const inner = newBus();
    const flaky = new FlakyBus(inner, 3);
    const readiness = new ReadinessRegistry();
    const seen: number[] = [];
    const delays: number[] = [];
    const helper = new BackgroundSubscription({
      name: 'policy-versions',
      bus: flaky.asBus(),
      logger,
      readiness,
      backoff: (attempt) => (delays.push(attempt), 5),
      subscribe: {
        group: 'g',
        topics: [TOPICS.policyVersions],
        fromBeginning: true,
        handler: async (e) => void seen.push((e.payload as { version: number }).version),
      },
    });
    // Registered at construction: not ready before start, nor while retrying.
    expect((await readiness.evaluate()).checks['policy-versions'].ok).toBe(false);
    helper.start();
    const pending = await readiness.evaluate();
    expect(pending.ready).toBe(false);
    expect(pending.checks['policy-versions'].ok).toBe(false);
    await helper.whenSubscribed();
    expect(flaky.calls).toBe(4);
    expect(delays).toEqual([1, 2, 3]);
    expect(helper.failedAttempts).toBe(3);
    expect((await readiness.evaluate()).checks['policy-versions'].ok).toBe(true);

    await inner.publish(activation(7));
    for (let i = 0; i < 200 && seen.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(seen).toEqual([7]);
    await helper.stop();
    expect(helper.subscribed).toBe(false);
  });

  it('stops during the backoff sleep at once, and makes no further attempt', async () => {
    const flaky = new FlakyBus(newBus(), Number.POSITIVE_INFINITY);
    const helper = new BackgroundSubscription({
      name: 'c',
      bus: flaky.asBus(),
      logger,
      backoff: () => 60_000,
      subscribe: { group: 'g', topics: [TOPICS.policyVersions], handler: async () => undefined },
    }).start();
    for (let i = 0; i < 200 && flaky.calls === 0; i++) await new Promise((r) => setTimeout(r, 5));
    const started = Date.now();
    await helper.stop();
    expect(Date.now() - started).toBeLessThan(2_000);
    const calls = flaky.calls;
    await new Promise((r) => setTimeout(r, 50));
    expect(flaky.calls).toBe(calls);
    expect(calls).toBe(1);
  });

  it('stopped while bus.subscribe is still joining: the late subscription is left at once and consumes nothing', async () => {
    const inner = newBus();
    const flaky = new FlakyBus(inner, 0);
    let release!: () => void;
    flaky.hold = new Promise<void>((r) => (release = r));
    const seen: string[] = [];
    const helper = new BackgroundSubscription({
      name: 'c',
      bus: flaky.asBus(),
      logger,
      stopTimeoutMs: 50,
      subscribe: { group: 'late', topics: [TOPICS.policyVersions], fromBeginning: true, handler: async (e) => void seen.push(e.id) },
    }).start();
    for (let i = 0; i < 200 && flaky.calls === 0; i++) await new Promise((r) => setTimeout(r, 5));
    // stop() waits at most stopTimeoutMs for the attempt in flight, then returns.
    await helper.stop();
    expect(helper.subscribed).toBe(false);
    release();
    for (let i = 0; i < 200 && flaky.joined.length === 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect(flaky.joined).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 20));
    // The member that joined late was stopped by the loop: a message published now goes to the
    // group's next member, not to it.
    const event = activation(1);
    await inner.publish(event);
    const taken: string[] = [];
    const next = await inner.subscribe({
      group: 'late',
      topics: [TOPICS.policyVersions],
      fromBeginning: true,
      handler: async (e) => void taken.push(e.id),
    });
    for (let i = 0; i < 200 && taken.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    await next.stop();
    expect(taken).toEqual([event.id]);
    expect(seen).toEqual([]);
    expect(helper.subscribed).toBe(false);
    expect(flaky.calls).toBe(1);
  });

  it('stops while prepare is still waiting (a database that is not up): prepare sees the abort, no subscribe happens', async () => {
    const flaky = new FlakyBus(newBus(), 0);
    let aborted = false;
    const helper = new BackgroundSubscription({
      name: 'c',
      bus: flaky.asBus(),
      logger,
      prepare: (signal) =>
        new Promise<void>((_, reject) =>
          signal.addEventListener('abort', () => {
            aborted = true;
            reject(new Error('aborted'));
          }),
        ),
      subscribe: { group: 'g', topics: [TOPICS.policyVersions], handler: async () => undefined },
    }).start();
    await new Promise((r) => setTimeout(r, 20));
    await helper.stop();
    await new Promise((r) => setTimeout(r, 20));
    expect(aborted).toBe(true);
    expect(flaky.calls).toBe(0);
    expect(helper.failedAttempts).toBe(0);
  });

  it('does not wait for a prepare that ignores the signal (a schema gate retrying forever), and never subscribes after', async () => {
    const flaky = new FlakyBus(newBus(), 0);
    let finish!: () => void;
    const helper = new BackgroundSubscription({
      name: 'c',
      bus: flaky.asBus(),
      logger,
      prepare: () => new Promise<void>((r) => (finish = r)),
      subscribe: { group: 'g', topics: [TOPICS.policyVersions], handler: async () => undefined },
    }).start();
    await new Promise((r) => setTimeout(r, 20));
    const started = Date.now();
    await helper.stop();
    expect(Date.now() - started).toBeLessThan(1_000);
    finish();
    await new Promise((r) => setTimeout(r, 50));
    expect(flaky.calls).toBe(0);
  });

  it('is safe to stop before start, and twice', async () => {
    const flaky = new FlakyBus(newBus(), 0);
    const helper = new BackgroundSubscription({
      name: 'c',
      bus: flaky.asBus(),
      logger,
      subscribe: { group: 'g', topics: [TOPICS.policyVersions], handler: async () => undefined },
    });
    await helper.stop();
    helper.start();
    await helper.stop();
    expect(flaky.calls).toBe(0);
  });
});

describe('BackgroundStart (a runtime rather than a bare subscription)', () => {
  class Runtime {
    stopped = false;
    async stop() {
      this.stopped = true;
    }
  }

  it('retries start until it succeeds, reports readiness, and stops what it started', async () => {
    const readiness = new ReadinessRegistry();
    let failures = 2;
    const made: Runtime[] = [];
    const task = new BackgroundStart<Runtime>({
      name: 'data-pool',
      logger,
      readiness,
      backoff: () => 5,
      start: async () => {
        if (failures-- > 0) throw new Error('database not up');
        const r = new Runtime();
        made.push(r);
        return r;
      },
      stop: (r) => r.stop(),
    }).run();
    expect((await readiness.evaluate()).checks['data-pool'].ok).toBe(false);
    await task.whenStarted();
    expect(task.failedAttempts).toBe(2);
    expect(task.current).toBe(made[0]);
    expect((await readiness.evaluate()).checks['data-pool'].ok).toBe(true);
    await task.stop();
    expect(made.map((r) => r.stopped)).toEqual([true]);
    expect(task.isStarted).toBe(false);
  });

  it('stopped while start is in flight: returns after stopTimeoutMs, and stops the runtime once start returns it', async () => {
    let finish!: () => void;
    const late = new Runtime();
    const task = new BackgroundStart<Runtime>({
      name: 'c',
      logger,
      stopTimeoutMs: 30,
      start: () => new Promise<Runtime>((r) => (finish = () => r(late))),
      stop: (r) => r.stop(),
    }).run();
    await new Promise((r) => setTimeout(r, 10));
    const started = Date.now();
    await task.stop();
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(late.stopped).toBe(false);
    finish();
    for (let i = 0; i < 100 && !late.stopped; i++) await new Promise((r) => setTimeout(r, 5));
    expect(late.stopped).toBe(true);
    expect(task.isStarted).toBe(false);
  });
});
