import type { LoggerService } from '@nestjs/common';
import type { Logger } from '@anvil/observability';

/** Routes Nest's own log calls into the service's JSON logger. */
export class NestLoggerBridge implements LoggerService {
  constructor(private readonly logger: Logger) {}
  log(message: unknown, context?: string) {
    this.logger.info(String(message), context ? { context } : undefined);
  }
  error(message: unknown, trace?: string, context?: string) {
    this.logger.error(String(message), { context, trace });
  }
  warn(message: unknown, context?: string) {
    this.logger.warn(String(message), context ? { context } : undefined);
  }
  debug(message: unknown, context?: string) {
    this.logger.debug(String(message), context ? { context } : undefined);
  }
  verbose(message: unknown, context?: string) {
    this.logger.debug(String(message), context ? { context } : undefined);
  }
}
