/**
 * The few log calls the bus makes. Structurally compatible with @anvil/observability's Logger,
 * so a service passes its own logger; messaging does not depend on observability.
 */
export interface BusLogger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export type BusLogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';
const RANK: Record<BusLogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export function levelEnabled(level: Exclude<BusLogLevel, 'silent'>, min: BusLogLevel): boolean {
  return RANK[level] >= RANK[min];
}

/** Default when no logger is given: warnings and errors to stderr, one JSON object a line. */
export function stderrLogger(min: BusLogLevel = 'warn'): BusLogger {
  const write = (level: Exclude<BusLogLevel, 'silent'>) => (msg: string, fields?: Record<string, unknown>) => {
    if (!levelEnabled(level, min)) return;
    process.stderr.write(
      `${JSON.stringify({ time: new Date().toISOString(), level, component: 'messaging', msg, ...fields }, errorReplacer)}\n`,
    );
  };
  return { debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') };
}

const ignore = (): void => undefined;
export const silentLogger: BusLogger = { debug: ignore, info: ignore, warn: ignore, error: ignore };

function errorReplacer(_key: string, value: unknown): unknown {
  return value instanceof Error ? { name: value.name, message: value.message } : value;
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
