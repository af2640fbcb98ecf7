import { logLevel, type LogEntry } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import type { BusLogger } from '../logger';
import { kafkaLogCreator } from './kafka-logger';

function capture() {
  const lines: [string, string, Record<string, unknown> | undefined][] = [];
  const at = (level: string) => (msg: string, fields?: Record<string, unknown>) => void lines.push([level, msg, fields]);
  const logger: BusLogger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
  return { lines, logger };
}

const entry = (namespace: string, level: logLevel, message: string, extra: Record<string, unknown> = {}): LogEntry => ({
  namespace,
  level,
  label: '',
  log: { timestamp: 'now', logger: 'kafkajs', message, ...extra },
});

describe('kafkajs log routing', () => {
  it('passes real problems through and demotes retried broker answers below WARN', () => {
    const { lines, logger } = capture();
    const log = kafkaLogCreator(logger, logLevel.WARN)(logLevel.WARN);
    log(entry('Connection', logLevel.ERROR, 'Response Produce(key: 0, version: 7)', { error: 'not the leader' }));
    log(entry('Producer', logLevel.ERROR, 'Failed to send messages: not the leader', { retryCount: 1, retryTime: 50 }));
    log(entry('Runner', logLevel.WARN, 'The group is rebalancing, re-joining'));
    log(entry('Consumer', logLevel.ERROR, 'Crash: KafkaJSNumberOfRetriesExceeded', { stack: 'trace', retryCount: 5 }));
    log(entry('Cluster', logLevel.WARN, 'Broker disconnected'));
    expect(lines).toEqual([
      ['error', 'Crash: KafkaJSNumberOfRetriesExceeded', { kafkajs: 'Consumer', stack: 'trace', retryCount: 5 }],
      ['warn', 'Broker disconnected', { kafkajs: 'Cluster' }],
    ]);
  });

  it('keeps demoted entries at debug level', () => {
    const { lines, logger } = capture();
    kafkaLogCreator(logger, logLevel.DEBUG)(logLevel.DEBUG)(entry('Connection', logLevel.ERROR, 'Response Heartbeat(key: 12, version: 3)'));
    expect(lines.map(([level]) => level)).toEqual(['debug']);
  });
});
