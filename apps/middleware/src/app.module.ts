import { Module, type DynamicModule } from '@nestjs/common';
import type { ServiceContext } from '@anvil/observability';
import { serviceCoreModules } from '@anvil/service-kit';
import { dataPoolOptionsOf, type MiddlewareConfig } from './config';
import { DATA_POOL_OPTIONS, DataPoolConsumer } from './data-pool/data-pool.consumer';

/** The middleware service: the Data Pool (DataPoolRuntime: storage, groups and advantages, filters, Windowed-FIFO train batches). */
@Module({})
export class MiddlewareModule {
  static forRoot(ctx: ServiceContext<MiddlewareConfig>): DynamicModule {
    const options = dataPoolOptionsOf(ctx.config);
    return {
      module: MiddlewareModule,
      imports: [...serviceCoreModules(ctx)],
      providers: [{ provide: DATA_POOL_OPTIONS, useValue: options }, DataPoolConsumer],
    };
  }
}
