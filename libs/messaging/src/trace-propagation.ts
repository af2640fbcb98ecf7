import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type TextMapGetter,
  type TextMapSetter,
} from '@opentelemetry/api';
import { errorMessage } from './logger';

/**
 * W3C trace context across the bus: the publisher's active context goes into message headers,
 * the consumer runs the handler inside a CONSUMER span whose parent is that context. Only the
 * OpenTelemetry API is used; the SDK is started elsewhere (libs/observability). Without one
 * these calls are no-ops.
 */
const setter: TextMapSetter<Record<string, string>> = {
  set: (carrier, key, value) => {
    carrier[key] = value;
  },
};

const getter: TextMapGetter<Readonly<Record<string, string>>> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => carrier[key],
};

const tracer = () => trace.getTracer('@anvil/messaging');

/** Adds the active trace context (traceparent, tracestate, baggage) to `headers`, or `ctx`'s when given. */
export function injectTraceContext(headers: Record<string, string>, ctx: Context = context.active()): Record<string, string> {
  propagation.inject(ctx, headers, setter);
  return headers;
}

const eventContexts = new WeakMap<object, Context>();

/**
 * Publishes of `event` carry the trace context `ctx` (default: the active one now) instead of
 * the publisher's context at publish time: for events of several callers published together in
 * one batch (the gateway's group commit), each keeps the trace of the call it records.
 */
export function bindTraceContext<E extends object>(event: E, ctx: Context = context.active()): E {
  eventContexts.set(event, ctx);
  return event;
}

/** The context bound to `event` by bindTraceContext, if any. */
export function boundTraceContext(event: object): Context | undefined {
  return eventContexts.get(event);
}

export interface ConsumeSpanInfo {
  system: 'kafka' | 'anvil-memory';
  topic: string;
  group: string;
  partition: number;
  offset: string;
  attempt: number;
}

/** Runs `fn` in the trace context carried by `headers`, inside a CONSUMER span. */
export async function withConsumerSpan<T>(
  headers: Readonly<Record<string, string>>,
  info: ConsumeSpanInfo,
  fn: () => Promise<T>,
): Promise<T> {
  const parent = propagation.extract(ROOT_CONTEXT, headers, getter);
  const span = tracer().startSpan(
    `process ${info.topic}`,
    {
      kind: SpanKind.CONSUMER,
      attributes: {
        'messaging.system': info.system,
        'messaging.operation.type': 'process',
        'messaging.destination.name': info.topic,
        'messaging.consumer.group.name': info.group,
        'messaging.destination.partition.id': String(info.partition),
        'messaging.kafka.offset': Number(info.offset),
        'anvil.delivery.attempt': info.attempt,
      },
    },
    parent,
  );
  try {
    return await context.with(trace.setSpan(parent, span), fn);
  } catch (err) {
    span.recordException(err instanceof Error ? err : new Error(errorMessage(err)));
    span.setStatus({ code: SpanStatusCode.ERROR, message: errorMessage(err) });
    throw err;
  } finally {
    span.end();
  }
}
