/**
 * Structured JSON-lines logger. Services log one object per line so log shippers parse them
 * without regexes; the active trace id is attached so a log line can be joined to its trace.
 */
import { trace } from '@opentelemetry/api';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

export function createLogger(opts: {
  service: string;
  level?: LogLevel;
  sink?: (line: string) => void;
  base?: Record<string, unknown>;
}): Logger {
  const min = RANK[opts.level ?? 'info'];
  const sink = opts.sink ?? ((line: string) => process.stdout.write(line + '\n'));
  const base = { service: opts.service, ...opts.base };
  const write = (level: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (RANK[level] < min) return;
    const span = trace.getActiveSpan()?.spanContext();
    const record: Record<string, unknown> = { time: new Date().toISOString(), level, msg, ...base, ...fields };
    if (span) record.traceId = span.traceId;
    if (fields?.err instanceof Error) record.err = { name: fields.err.name, message: fields.err.message, stack: fields.err.stack };
    sink(JSON.stringify(record));
  };
  return {
    debug: (m, f) => write('debug', m, f),
    info: (m, f) => write('info', m, f),
    warn: (m, f) => write('warn', m, f),
    error: (m, f) => write('error', m, f),
    child: (fields) => createLogger({ ...opts, base: { ...opts.base, ...fields } }),
  };
}
