import { AsyncLocalStorage } from 'node:async_hooks';
import {
  context,
  propagation,
  ROOT_CONTEXT,
  trace,
  TraceFlags,
  type Context,
  type ContextManager,
  type TextMapGetter,
  type TextMapPropagator,
  type TextMapSetter,
} from '@opentelemetry/api';

/**
 * Just enough OpenTelemetry for a test to see trace context cross the bus without an SDK: an
 * AsyncLocalStorage context manager and a W3C `traceparent` propagator. Spans stay the API's
 * non-recording ones, which carry their parent's trace id — all a propagation test needs.
 */
class AsyncLocalContextManager implements ContextManager {
  private readonly storage = new AsyncLocalStorage<Context>();

  active(): Context {
    return this.storage.getStore() ?? ROOT_CONTEXT;
  }

  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    ctx: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    return this.storage.run(ctx, () => fn.apply(thisArg, args));
  }

  bind<T>(ctx: Context, target: T): T {
    if (typeof target !== 'function') return target;
    const run = (...args: unknown[]) => this.with(ctx, () => (target as (...a: unknown[]) => unknown)(...args));
    return run as T;
  }

  enable(): this {
    return this;
  }

  disable(): this {
    this.storage.disable();
    return this;
  }
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

class TraceparentPropagator implements TextMapPropagator {
  inject(ctx: Context, carrier: unknown, setter: TextMapSetter): void {
    const sc = trace.getSpanContext(ctx);
    if (!sc || !trace.isSpanContextValid(sc)) return;
    setter.set(carrier, 'traceparent', `00-${sc.traceId}-${sc.spanId}-0${(sc.traceFlags & TraceFlags.SAMPLED).toString(16)}`);
  }

  extract(ctx: Context, carrier: unknown, getter: TextMapGetter): Context {
    const raw = getter.get(carrier, 'traceparent');
    const match = TRACEPARENT.exec(Array.isArray(raw) ? (raw[0] ?? '') : (raw ?? ''));
    if (!match) return ctx;
    return trace.setSpanContext(ctx, { traceId: match[1], spanId: match[2], traceFlags: parseInt(match[3], 16), isRemote: true });
  }

  fields(): string[] {
    return ['traceparent'];
  }
}

/** Registers the test context manager and propagator globally; returns the undo. */
export function installTestTracing(): () => void {
  context.setGlobalContextManager(new AsyncLocalContextManager());
  propagation.setGlobalPropagator(new TraceparentPropagator());
  return () => {
    propagation.disable();
    context.disable();
  };
}

/** Runs `fn` as if inside a sampled span with these ids. */
export function withRemoteParent<T>(traceId: string, spanId: string, fn: () => T): T {
  return context.with(trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId, traceFlags: TraceFlags.SAMPLED }), fn);
}
