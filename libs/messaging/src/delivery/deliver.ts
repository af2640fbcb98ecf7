import { ContractError } from '@anvil/contracts';
import type { DeadLetterReason, MessageMeta } from '../bus';
import { deadLetterHeaders, readDeliveryState, retryHeaders, type DeliveryState } from '../headers';
import { errorMessage, type BusLogger } from '../logger';
import type { TopicNamespace, TopicRoute } from '../topic-names';
import { withConsumerSpan, type ConsumeSpanInfo } from '../trace-propagation';
import { backoffMs, type DeliveryPolicy } from './policy';
import { settleUnlessAbandoned, sleep, startKeepAlive, type DeliverySignals, type KeepAlive } from './signals';

/**
 * The one delivery pipeline both buses run for every message they read: decode (poison →
 * DLQ), handler attempts with backoff, then retry topic or DLQ. The bus around it only reads
 * records, commits when this resolves with anything but 'interrupted', and provides `forward`
 * (a durable write of a retry or dead-letter copy).
 */

/** A message as read from a partition (both buses produce this shape). */
export interface InboundRecord {
  /** Physical topic. */
  topic: string;
  partition: number;
  offset: string;
  key: string | null;
  value: Buffer | null;
  headers: Readonly<Record<string, string>>;
}

export interface OutboundRecord {
  key: string | null;
  value: Buffer | null;
  headers: Record<string, string>;
}

/** What the handler gets: a decoded event (subscribe) or the bytes (subscribeRaw). */
export interface Processor<T> {
  /** Throws (a ContractError, normally) when the message is poison. */
  decode(record: InboundRecord): T;
  handle(decoded: T, meta: MessageMeta): Promise<void>;
  /** Optional batch fast path (see SubscribeOptions.batchHandler). */
  handleBatch?(items: ReadonlyArray<{ event: T; meta: MessageMeta }>): Promise<void>;
  maxBatchSize?: number;
}

export interface DeliveryEnv {
  system: ConsumeSpanInfo['system'];
  ns: TopicNamespace;
  group: string;
  policy: DeliveryPolicy;
  /** Durable write to a physical topic; rejects if the copy could not be stored. */
  forward(physicalTopic: string, record: OutboundRecord): Promise<void>;
  signals: DeliverySignals;
  /** Kafka: heartbeats while a handler or a backoff runs, so the group does not rebalance. */
  keepAlive?: KeepAlive;
  logger: BusLogger;
}

/**
 * handled / retrying (copy in the retry topic) / dead-lettered: commit the offset.
 * interrupted: stopped or abandoned midway; leave the offset uncommitted.
 */
export type DeliveryOutcome = 'handled' | 'retrying' | 'dead-lettered' | 'interrupted';

/** Epoch ms before which the record must not be attempted (retry-topic copies); 0 when due. */
export function dueAt(record: InboundRecord, route: TopicRoute): number {
  return route.kind === 'retry' ? stateOf(record, route).notBefore : 0;
}

function metaOf(record: InboundRecord, route: TopicRoute, env: DeliveryEnv, state: DeliveryState, attempt: number): MessageMeta {
  return {
    topic: route.logical,
    partition: state.origin.partition,
    offset: state.origin.offset,
    group: env.group,
    attempt,
    deliveredFrom: { topic: env.ns.logical(record.topic), partition: record.partition, offset: record.offset },
    headers: record.headers,
  };
}

/**
 * The batch fast path: runs of consecutive decodable records go to `processor.handleBatch` in
 * one call; a poison record ends a run and is dead-lettered through `deliver`; a failed batch
 * falls back to `deliver` record by record (attempts, retry topic, DLQ as usual). Resolves with
 * how many leading records are done (their offsets may be committed); fewer than all means
 * the delivery was interrupted by a stop.
 */
export async function deliverBatch<T>(
  records: readonly InboundRecord[],
  route: TopicRoute,
  processor: Processor<T>,
  env: DeliveryEnv,
): Promise<number> {
  const handleBatch = processor.handleBatch;
  if (!handleBatch || route.kind === 'retry') return deliverEach(records, 0, route, processor, env);
  let done = 0;
  while (done < records.length) {
    const run: { event: T; meta: MessageMeta }[] = [];
    // A run shares one trace: it is handled inside the context its messages carry, so a
    // trajectory's trace continues into the consumer's work as on the per-message path.
    const trace = traceIdOf(records[done]);
    for (let i = done; i < records.length && run.length < (processor.maxBatchSize ?? 256); i++) {
      if (traceIdOf(records[i]) !== trace) break;
      let event: T;
      try {
        event = processor.decode(records[i]);
      } catch {
        break; // poison: deliver() below dead-letters it with its reason
      }
      run.push({ event, meta: metaOf(records[i], route, env, stateOf(records[i], route), 1) });
    }
    if (run.length === 0) {
      const next = await deliverEach(records.slice(done, done + 1), 0, route, processor, env);
      if (next === 0) return done;
      done += 1;
      continue;
    }
    const stopKeepAlive = startKeepAlive(env.keepAlive);
    const first = run[0].meta;
    const span: ConsumeSpanInfo = {
      system: env.system,
      topic: route.logical,
      group: env.group,
      partition: first.partition,
      offset: first.offset,
      attempt: 1,
    };
    const result = await settleUnlessAbandoned(
      () => withConsumerSpan(records[done].headers, span, () => handleBatch(run)),
      env.signals.abandon,
    ).finally(stopKeepAlive);
    if (result.status === 'abandoned') return done;
    if (result.status === 'ok') {
      done += run.length;
      continue;
    }
    env.logger.debug('batch handler failed; delivering its messages one by one', {
      group: env.group,
      topic: route.logical,
      size: run.length,
      error: errorMessage(result.error),
    });
    const handled = await deliverEach(records.slice(done, done + run.length), 0, route, processor, env);
    done += handled;
    if (handled < run.length) return done;
  }
  return done;
}

/** The W3C trace id a record carries ('' when none). */
function traceIdOf(record: InboundRecord): string {
  return record.headers.traceparent?.split('-')[1] ?? '';
}

async function deliverEach<T>(
  records: readonly InboundRecord[],
  from: number,
  route: TopicRoute,
  processor: Processor<T>,
  env: DeliveryEnv,
): Promise<number> {
  let done = from;
  for (; done < records.length; done++) {
    if ((await deliver(records[done], route, processor, env)) === 'interrupted') break;
  }
  return done;
}

function stateOf(record: InboundRecord, route: TopicRoute): DeliveryState {
  return readDeliveryState(record.headers, route.kind === 'retry', {
    topic: route.logical,
    partition: record.partition,
    offset: record.offset,
  });
}

export async function deliver<T>(
  record: InboundRecord,
  route: TopicRoute,
  processor: Processor<T>,
  env: DeliveryEnv,
): Promise<DeliveryOutcome> {
  const stopKeepAlive = startKeepAlive(env.keepAlive);
  try {
    return await deliverInner(record, route, processor, env);
  } finally {
    stopKeepAlive();
  }
}

async function deliverInner<T>(
  record: InboundRecord,
  route: TopicRoute,
  processor: Processor<T>,
  env: DeliveryEnv,
): Promise<DeliveryOutcome> {
  const { policy, signals, logger, group } = env;
  const state = stateOf(record, route);
  const where = { topic: route.logical, partition: state.origin.partition, offset: state.origin.offset, group };

  let decoded: T;
  try {
    decoded = processor.decode(record);
  } catch (err) {
    // Poison: retrying cannot help and must not block the partition.
    const reason: DeadLetterReason = err instanceof ContractError ? err.reason : 'malformed_frame';
    logger.warn('poison message sent to the dead-letter topic', { ...where, reason, error: errorMessage(err) });
    await deadLetter(record, route, env, state, { reason, attempts: state.attemptsSoFar, error: errorMessage(err) });
    return 'dead-lettered';
  }

  let lastError: unknown;
  for (let i = 1; i <= policy.maxAttempts; i++) {
    if (i > 1 && !(await sleep(backoffMs(policy, i - 1), signals.stop))) return 'interrupted';
    const attempt = state.attemptsSoFar + i;
    const meta = metaOf(record, route, env, state, attempt);
    const span: ConsumeSpanInfo = {
      system: env.system,
      topic: route.logical,
      group,
      partition: meta.partition,
      offset: meta.offset,
      attempt,
    };
    const result = await settleUnlessAbandoned(
      () => withConsumerSpan(record.headers, span, () => processor.handle(decoded, meta)),
      signals.abandon,
    );
    if (result.status === 'ok') return 'handled';
    if (result.status === 'abandoned') return 'interrupted';
    lastError = result.error;
    logger.debug('handler failed', { ...where, attempt, error: errorMessage(lastError) });
  }

  const attempts = state.attemptsSoFar + policy.maxAttempts;
  const error = errorMessage(lastError);
  if (state.retryRound < policy.retryRounds) {
    const retryRound = state.retryRound + 1;
    const headers = retryHeaders(record.headers, {
      origin: state.origin,
      group,
      attempts,
      retryRound,
      notBefore: Date.now() + policy.retryTopicDelayMs,
      error,
    });
    await env.forward(route.retryTopic, { key: record.key, value: record.value, headers });
    logger.warn('handler failed; message moved to the retry topic', { ...where, attempts, retryRound, error });
    return 'retrying';
  }
  logger.error('handler failed; message sent to the dead-letter topic', { ...where, attempts, error });
  await deadLetter(record, route, env, state, { reason: 'handler_failed', attempts, error });
  return 'dead-lettered';
}

function deadLetter(
  record: InboundRecord,
  route: TopicRoute,
  env: DeliveryEnv,
  state: DeliveryState,
  failure: { reason: DeadLetterReason; attempts: number; error: string },
): Promise<void> {
  const headers = deadLetterHeaders(record.headers, { origin: state.origin, group: env.group, failedAt: Date.now(), ...failure });
  return env.forward(route.deadLetterTopic, { key: record.key, value: record.value, headers });
}
