import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import type { z } from 'zod';
import { loadConfig } from '@anvil/config';
import { createBus, silentLogger, type BusConfig, type MessageBus } from '@anvil/messaging';
import { createDataSource, runMigrations } from '@anvil/persistence';
import { createLogger, ServiceMetrics, startTelemetry, type LogLevel, type Logger } from '@anvil/observability';
import type { SharedInfra } from './infra.module';
import { NestLoggerBridge } from './nest-logger';
import { ReadinessRegistry } from './readiness';
import type { BaseServiceConfig, HostedServiceContext } from './service-modules';

export interface SharedInfraOptions {
  /** `memory` (default) or `pglite://<dir>` for embedded PGlite; a postgres:// URL also works. */
  databaseUrl?: string;
  /** The in-process bus (default), or a Kafka bus shared by the hosted services. */
  bus?: BusConfig;
  /** Apply the committed migrations before any service starts (default true). */
  migrate?: boolean;
  /** Where embedded PGlite runs (see CreateDataSourceOptions.pgliteThread). */
  pgliteThread?: 'main' | 'worker';
}

/**
 * Builds the infrastructure of a one-process deployment once: ONE bus (the in-process
 * MemoryBus by default) and ONE DataSource (PGlite in memory or in a directory by default),
 * initialized and migrated. Every service module hosted in the process gets these instances
 * through `hostedServiceContext(..., infra)`, so their events flow through the same bus and
 * their rows land in the same database. Close the services first, then `infra.close()`.
 */
export async function createSharedInfra(options: SharedInfraOptions = {}): Promise<SharedInfra> {
  const spec: BusConfig = options.bus ?? { kind: 'memory' };
  const bus: MessageBus = spec.kind === 'memory' ? createBus({ logger: silentLogger, ...spec }) : createBus(spec);
  const dataSource = createDataSource({ url: options.databaseUrl ?? 'memory', pgliteThread: options.pgliteThread });
  try {
    await dataSource.initialize();
    if (options.migrate ?? true) await runMigrations(dataSource);
  } catch (err) {
    if (dataSource.isInitialized) await dataSource.destroy().catch(() => undefined);
    await bus.close().catch(() => undefined);
    throw err;
  }
  let closed: Promise<void> | null = null;
  return {
    bus,
    dataSource,
    close: () =>
      (closed ??= (async () => {
        await bus.close();
        if (dataSource.isInitialized) await dataSource.destroy();
      })()),
  };
}

/**
 * The context a service module is built from inside the host: its environment validated by
 * the service's own schema (every problem at once, ConfigError), with EVENT_BUS_KIND=memory
 * and DATABASE_URL of the shared database filled in unless given, its own logger and metrics
 * registry, and `infra` (which serviceCoreModules uses instead of building a bus and a DataSource).
 */
export function hostedServiceContext<S extends z.ZodObject>(
  service: string,
  envSchema: S,
  env: Record<string, string | undefined>,
  infra: SharedInfra,
  options: { logger?: Logger; logLevel?: LogLevel } = {},
): HostedServiceContext<z.infer<S>> {
  const config = loadConfig(service, envSchema, {
    EVENT_BUS_KIND: infra.bus.kind,
    DATABASE_URL: (infra.dataSource.options as { url?: string }).url ?? 'memory',
    ...env,
  });
  const logLevel = options.logLevel ?? (config as { LOG_LEVEL?: LogLevel }).LOG_LEVEL ?? 'info';
  return {
    service,
    config,
    // One OpenTelemetry SDK per process: the first caller starts it, later calls share it.
    telemetry: startTelemetry({
      serviceName: 'anvil',
      otlpEndpoint: (config as { OTEL_EXPORTER_OTLP_ENDPOINT?: string }).OTEL_EXPORTER_OTLP_ENDPOINT,
    }),
    logger: options.logger ?? createLogger({ service, level: logLevel }),
    metrics: new ServiceMetrics(service),
    infra,
  };
}

export interface HostedService {
  service: string;
  app: NestFastifyApplication;
  /** http://host:port the service listens on (port 0 in its config = a free one). */
  url: string;
  port: number;
  /** Reports not-ready, then closes the app (its consumers stop; the shared infra stays open). */
  close(): Promise<void>;
}

/**
 * Starts one service's Nest module in this process, on its own HTTP port, without the
 * signal handlers and process.exit of a standalone service (the host owns the process).
 */
export async function startHostedService(
  ctx: HostedServiceContext<BaseServiceConfig>,
  rootModule: unknown,
  options: { bodyLimitBytes?: number } = {},
): Promise<HostedService> {
  const app = await NestFactory.create<NestFastifyApplication>(
    rootModule as never,
    new FastifyAdapter({ bodyLimit: options.bodyLimitBytes ?? 8 * 1024 * 1024 }),
    {
      logger: new NestLoggerBridge(ctx.logger),
      abortOnError: false,
    },
  );
  await app.listen(ctx.config.PORT, ctx.config.HOST ?? '127.0.0.1');
  const address = app.getHttpServer().address();
  const port = typeof address === 'object' && address ? address.port : ctx.config.PORT;
  ctx.logger.info('listening', { port, host: ctx.config.HOST, pid: process.pid, hosted: true });
  let closing: Promise<void> | null = null;
  return {
    service: ctx.service,
    app,
    port,
    url: `http://${ctx.config.HOST ?? '127.0.0.1'}:${port}`,
    close: () =>
      (closing ??= (async () => {
        app.get(ReadinessRegistry).markDraining();
        await app.close();
      })()),
  };
}
