import { Module, type DynamicModule } from '@nestjs/common';
import type { ServiceContext } from '@anvil/observability';
import { serviceCoreModules } from '@anvil/service-kit';
import type { TrainerConfig } from './config';
import { TrainerController } from './http/trainer.controller';
import { TrainerLifecycle } from './runtime.provider';
import { TRAINER_CONFIG } from './tokens';

/**
 * The trainer service: consumes train_batch.created, packs each batch as a prefix tree, trains
 * (loss, AdamW), checkpoints and publishes weights.published (a thin shell around TrainerRuntime).
 */
@Module({})
export class TrainerModule {
  static forRoot(ctx: ServiceContext<TrainerConfig>): DynamicModule {
    return {
      module: TrainerModule,
      imports: [...serviceCoreModules(ctx)],
      controllers: [TrainerController],
      providers: [{ provide: TRAINER_CONFIG, useValue: ctx.config }, TrainerLifecycle],
    };
  }
}
