import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import type { Logger, ServiceContext, Telemetry } from '@anvil/observability';
import { NestLoggerBridge } from './nest-logger';
import { ReadinessRegistry } from './readiness';
import type { BaseServiceConfig } from './service-modules';

export interface BootstrapOptions {
  service: string;
  rootModule: unknown;
  port: number;
  host?: string;
  logger: Logger;
  telemetry: Telemetry;
  shutdownTimeoutMs: number;
  bodyLimitBytes?: number;
}

/**
 * Starts a service's Nest app on Fastify and wires graceful shutdown: on SIGTERM/SIGINT the
 * service reports not-ready, stops accepting connections, lets modules commit or hand back
 * in-flight work (their onModuleDestroy / beforeApplicationShutdown hooks), flushes traces,
 * and exits 0; if that takes longer than the deadline it exits 1 rather than hang.
 */
export async function bootstrapService(opts: BootstrapOptions): Promise<NestFastifyApplication> {
  const app = await NestFactory.create<NestFastifyApplication>(
    opts.rootModule as never,
    new FastifyAdapter({ bodyLimit: opts.bodyLimitBytes ?? 8 * 1024 * 1024 }),
    {
      logger: new NestLoggerBridge(opts.logger),
      abortOnError: false,
    },
  );
  await app.listen(opts.port, opts.host ?? '127.0.0.1');
  const address = app.getHttpServer().address();
  const port = typeof address === 'object' && address ? address.port : opts.port;
  // A machine-readable line tests and supervisors can wait for (port 0 = pick a free one).
  opts.logger.info('listening', { port, host: opts.host ?? '127.0.0.1', pid: process.pid });

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    opts.logger.info('shutting down', { signal });
    const deadline = setTimeout(() => {
      opts.logger.error('shutdown deadline exceeded; exiting', { timeoutMs: opts.shutdownTimeoutMs });
      process.exit(1);
    }, opts.shutdownTimeoutMs);
    deadline.unref();
    try {
      const started = Date.now();
      app.get(ReadinessRegistry).markDraining();
      await app.close();
      const appClosedMs = Date.now() - started;
      await opts.telemetry.shutdown();
      opts.logger.info('stopped cleanly', { appClosedMs, totalMs: Date.now() - started });
      process.exit(0);
    } catch (err) {
      opts.logger.error('shutdown failed', { err });
      process.exit(1);
    }
  };
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
  return app;
}

/** What a service's start.ts calls: its root module on the configured host and port. */
export function startNestService(ctx: ServiceContext<BaseServiceConfig>, rootModule: unknown) {
  return bootstrapService({
    service: ctx.service,
    rootModule,
    logger: ctx.logger,
    telemetry: ctx.telemetry,
    port: ctx.config.PORT,
    host: ctx.config.HOST,
    shutdownTimeoutMs: ctx.config.SHUTDOWN_TIMEOUT_MS,
  });
}
