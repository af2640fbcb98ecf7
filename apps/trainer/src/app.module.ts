import { Module, type DynamicModule } from '@nestjs/common';
import type { ServiceContext } from '@anvil/observability';
import { serviceCoreModules } from '@anvil/service-kit';
import type { TrainerConfig } from './config';

/** The trainer service: packing, losses, the optimizer, checkpoints and weight publishing (the training loop arrives with the engine and trainer issues). */
@Module({})
export class TrainerModule {
  static forRoot(ctx: ServiceContext<TrainerConfig>): DynamicModule {
    return { module: TrainerModule, imports: [...serviceCoreModules(ctx)] };
  }
}
