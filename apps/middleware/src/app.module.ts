import { Module, type DynamicModule } from '@nestjs/common';
import type { ServiceContext } from '@anvil/observability';
import { serviceCoreModules } from '@anvil/service-kit';
import type { MiddlewareConfig } from './config';
import { DATA_POOL_OPTIONS, DataPoolConsumer, type DataPoolOptions } from './data-pool/data-pool.consumer';

/** The middleware service: the Data Pool (trajectory storage now; rewards, filters and scheduling build on it). */
@Module({})
export class MiddlewareModule {
  static forRoot(ctx: ServiceContext<MiddlewareConfig>): DynamicModule {
    const options: DataPoolOptions = {
      group: ctx.config.DATA_POOL_GROUP,
      concurrency: ctx.config.DATA_POOL_CONCURRENCY,
      migrateOnStart: ctx.config.DB_MIGRATE_ON_START,
    };
    return {
      module: MiddlewareModule,
      imports: [...serviceCoreModules(ctx)],
      providers: [{ provide: DATA_POOL_OPTIONS, useValue: options }, DataPoolConsumer],
    };
  }
}
