import type { DynamicModule } from '@nestjs/common';
import type { ServiceContext } from '@anvil/observability';
import { InfraModule } from './infra.module';
import { OpsModule } from './ops.module';

/** The environment every distributed service has (see serviceBaseEnv in @anvil/config). */
export interface BaseServiceConfig {
  PORT: number;
  HOST: string;
  SHUTDOWN_TIMEOUT_MS: number;
  KAFKA_BROKERS: string[];
  DATABASE_URL: string;
  KAFKA_TOPIC_PREFIX: string;
}

/** Ops endpoints, logger, metrics, Kafka and PostgreSQL: what every service module imports. */
export function serviceCoreModules(ctx: ServiceContext<BaseServiceConfig>): DynamicModule[] {
  return [
    OpsModule.forRoot({ service: ctx.service, logger: ctx.logger, metrics: ctx.metrics }),
    InfraModule.forRoot({
      service: ctx.service,
      kafkaBrokers: ctx.config.KAFKA_BROKERS,
      databaseUrl: ctx.config.DATABASE_URL,
      topicPrefix: ctx.config.KAFKA_TOPIC_PREFIX,
    }),
  ];
}
