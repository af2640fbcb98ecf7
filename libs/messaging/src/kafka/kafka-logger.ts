import { logLevel, type logCreator } from 'kafkajs';
import type { BusLogger, BusLogLevel } from '../logger';

/** kafkajs' numeric level for a bus level (kafkajs filters before calling the log creator). */
export function kafkaLogLevel(level: BusLogLevel): logLevel {
  switch (level) {
    case 'debug':
      return logLevel.DEBUG;
    case 'info':
      return logLevel.INFO;
    case 'warn':
      return logLevel.WARN;
    case 'error':
      return logLevel.ERROR;
    case 'silent':
      return logLevel.NOTHING;
  }
}

/**
 * kafkajs logs every retriable broker answer at ERROR ("Response Produce ... not the leader",
 * "Response Heartbeat ... rebalancing") and every retry of a send, although it handles them
 * itself; an error that survives its retries reaches the caller as a rejected promise. Those
 * entries are demoted to debug so a WARN-level log shows only what needs a person.
 */
function isRoutine(namespace: string, message: string, extra: Record<string, unknown>): boolean {
  if (namespace === 'Connection' && message.startsWith('Response ')) return true;
  if ('retryCount' in extra && !('stack' in extra)) return true;
  return namespace === 'Runner' && message.startsWith('The group is rebalancing');
}

/** Routes kafkajs' log entries to the bus logger instead of kafkajs' own console output. */
export function kafkaLogCreator(logger: BusLogger, minLevel: logLevel): logCreator {
  return () =>
    ({ namespace, level, log }) => {
      const { message, timestamp: _timestamp, logger: _logger, ...extra } = log;
      const fields = { kafkajs: namespace, ...extra };
      const effective = level <= logLevel.WARN && isRoutine(namespace, message, extra) ? logLevel.DEBUG : level;
      // kafkajs already filtered by its level; demoted entries are filtered again here.
      if (effective > minLevel) return;
      if (effective === logLevel.ERROR) logger.error(message, fields);
      else if (effective === logLevel.WARN) logger.warn(message, fields);
      else if (effective === logLevel.INFO) logger.info(message, fields);
      else logger.debug(message, fields);
    };
}
