import { Module, type DynamicModule } from '@nestjs/common';
import type { ServiceContext } from '@anvil/observability';
import { serviceCoreModules } from '@anvil/service-kit';
import type { RolloutManagerConfig } from './config';

/** The rollout-manager service: task sets, rollout groups, agent processes and staleness admission. */
@Module({})
export class RolloutManagerModule {
  static forRoot(ctx: ServiceContext<RolloutManagerConfig>): DynamicModule {
    return { module: RolloutManagerModule, imports: [...serviceCoreModules(ctx)] };
  }
}
