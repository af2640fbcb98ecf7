import { Module, type DynamicModule } from '@nestjs/common';
import type { ServiceContext } from '@anvil/observability';
import { serviceCoreModules } from '@anvil/service-kit';
import type { MiddlewareConfig } from './config';
import { DATA_POOL_OPTIONS, DataPoolConsumer, type DataPoolOptions } from './data-pool/data-pool.consumer';

/** The middleware service: the Data Pool (DataPoolRuntime: storage, groups and advantages, filters, Windowed-FIFO train batches). */
@Module({})
export class MiddlewareModule {
  static forRoot(ctx: ServiceContext<MiddlewareConfig>): DynamicModule {
    const options: DataPoolOptions = {
      group: ctx.config.DATA_POOL_GROUP,
      concurrency: ctx.config.DATA_POOL_CONCURRENCY,
      migrateOnStart: ctx.config.DB_MIGRATE_ON_START,
      pool: {
        runId: ctx.config.DATA_POOL_RUN_ID,
        advantage: { estimator: ctx.config.DATA_POOL_ESTIMATOR, processRewardWeight: ctx.config.DATA_POOL_PROCESS_REWARD_WEIGHT },
        window: {
          inFlight: ctx.config.DATA_POOL_IN_FLIGHT,
          ...(ctx.config.DATA_POOL_WINDOW !== undefined ? { window: ctx.config.DATA_POOL_WINDOW } : {}),
          ...(ctx.config.DATA_POOL_HEAD_AGE_LIMIT_MS ? { headAgeLimitMs: ctx.config.DATA_POOL_HEAD_AGE_LIMIT_MS } : {}),
        },
        ...(ctx.config.DATA_POOL_BATCH_TRAJECTORIES ? { batchTrajectories: ctx.config.DATA_POOL_BATCH_TRAJECTORIES } : {}),
        ...(ctx.config.DATA_POOL_BATCH_TOKENS ? { batchTokens: ctx.config.DATA_POOL_BATCH_TOKENS } : {}),
        dropZeroVariance: ctx.config.DATA_POOL_DROP_ZERO_VARIANCE,
        callWaitMs: ctx.config.DATA_POOL_CALL_WAIT_MS,
        groupTimeoutMs: ctx.config.DATA_POOL_GROUP_TIMEOUT_MS,
      },
    };
    return {
      module: MiddlewareModule,
      imports: [...serviceCoreModules(ctx)],
      providers: [{ provide: DATA_POOL_OPTIONS, useValue: options }, DataPoolConsumer],
    };
  }
}
