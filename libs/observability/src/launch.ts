import type { z } from 'zod';
import { loadConfigOrExit } from '@anvil/config';
import { createLogger, type LogLevel, type Logger } from './logger';
import { ServiceMetrics } from './metrics';
import { startTelemetry, type Telemetry } from './telemetry';

export interface ServiceContext<C> {
  service: string;
  config: C;
  telemetry: Telemetry;
  logger: Logger;
  metrics: ServiceMetrics;
}

/**
 * The start sequence every service's main.ts uses: validate the whole environment (exit 78
 * listing every problem), start OpenTelemetry, and only then load the service's code, so
 * Nest, pg and kafkajs are required after their instrumentations are registered.
 */
export function launchService<S extends z.ZodObject & { shape: { LOG_LEVEL?: unknown; OTEL_EXPORTER_OTLP_ENDPOINT?: unknown } }>(opts: {
  service: string;
  envSchema: S;
  load: () => Promise<{ start(ctx: ServiceContext<z.infer<S>>): Promise<unknown> }>;
}): void {
  const config = loadConfigOrExit(opts.service, opts.envSchema);
  const { LOG_LEVEL, OTEL_EXPORTER_OTLP_ENDPOINT } = config as { LOG_LEVEL?: LogLevel; OTEL_EXPORTER_OTLP_ENDPOINT?: string };
  const telemetry = startTelemetry({ serviceName: opts.service, otlpEndpoint: OTEL_EXPORTER_OTLP_ENDPOINT });
  const logger = createLogger({ service: opts.service, level: LOG_LEVEL ?? 'info' });
  const metrics = new ServiceMetrics(opts.service);
  process.on('unhandledRejection', (reason) => logger.error('unhandled rejection', { err: reason }));
  opts
    .load()
    .then(({ start }) => start({ service: opts.service, config, telemetry, logger, metrics }))
    .catch(async (err: unknown) => {
      logger.error('failed to start', { err });
      await telemetry.shutdown().catch(() => undefined);
      process.exit(1);
    });
}
