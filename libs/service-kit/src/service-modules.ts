import type { DynamicModule } from '@nestjs/common';
import type { ServiceContext } from '@anvil/observability';
import { InfraModule, type SharedInfra } from './infra.module';
import { OpsModule } from './ops.module';

/** The environment every service has (see serviceBaseEnv in @anvil/config). */
export interface BaseServiceConfig {
  PORT: number;
  HOST: string;
  SHUTDOWN_TIMEOUT_MS: number;
  /** Default 'kafka' (configs built before the field existed have none). */
  EVENT_BUS_KIND?: 'kafka' | 'memory';
  KAFKA_BROKERS: string[];
  DATABASE_URL: string;
  KAFKA_TOPIC_PREFIX: string;
}

/**
 * A service's context inside the one-process host: the same context plus the bus and
 * database every service module of the process shares (see createSharedInfra).
 */
export type HostedServiceContext<C> = ServiceContext<C> & { infra?: SharedInfra };

/**
 * Ops endpoints, logger, metrics, the bus and the database: what every service module imports.
 * Kafka + PostgreSQL, or the in-process bus + PGlite, by configuration (EVENT_BUS_KIND,
 * DATABASE_URL); in the one-process host, the shared instances of `ctx.infra`.
 */
export function serviceCoreModules(ctx: HostedServiceContext<BaseServiceConfig>): DynamicModule[] {
  return [
    OpsModule.forRoot({ service: ctx.service, logger: ctx.logger, metrics: ctx.metrics }),
    InfraModule.forRoot({
      service: ctx.service,
      eventBusKind: ctx.config.EVENT_BUS_KIND,
      kafkaBrokers: ctx.config.KAFKA_BROKERS,
      databaseUrl: ctx.config.DATABASE_URL,
      topicPrefix: ctx.config.KAFKA_TOPIC_PREFIX,
      shared: ctx.infra,
    }),
  ];
}
