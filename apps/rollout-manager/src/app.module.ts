import { Module, type DynamicModule } from '@nestjs/common';
import type { ServiceContext } from '@anvil/observability';
import { serviceCoreModules } from '@anvil/service-kit';
import type { RolloutManagerConfig } from './config';
import { RolloutController } from './http.controller';
import { ROLLOUT_CONFIG, RuntimeLifecycle, runtimeProvider } from './runtime.provider';

/** The rollout-manager service: task sets, rollout groups, agent processes and staleness admission (a thin shell around RolloutRuntime). */
@Module({})
export class RolloutManagerModule {
  static forRoot(ctx: ServiceContext<RolloutManagerConfig>): DynamicModule {
    return {
      module: RolloutManagerModule,
      imports: [...serviceCoreModules(ctx)],
      controllers: [RolloutController],
      providers: [{ provide: ROLLOUT_CONFIG, useValue: ctx.config }, runtimeProvider, RuntimeLifecycle],
    };
  }
}
