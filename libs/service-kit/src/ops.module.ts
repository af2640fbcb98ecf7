import { Global, Module, type DynamicModule } from '@nestjs/common';
import type { Logger, ServiceMetrics } from '@anvil/observability';
import { OpsController } from './ops.controller';
import { ReadinessRegistry } from './readiness';
import { LOGGER, METRICS, SERVICE_NAME } from './tokens';

/** Health, readiness and metrics for a service, plus its logger and metrics registry. */
@Global()
@Module({})
export class OpsModule {
  static forRoot(opts: { service: string; logger: Logger; metrics: ServiceMetrics }): DynamicModule {
    return {
      module: OpsModule,
      controllers: [OpsController],
      providers: [
        { provide: SERVICE_NAME, useValue: opts.service },
        { provide: LOGGER, useValue: opts.logger },
        { provide: METRICS, useValue: opts.metrics },
        ReadinessRegistry,
      ],
      exports: [SERVICE_NAME, LOGGER, METRICS, ReadinessRegistry],
    };
  }
}
