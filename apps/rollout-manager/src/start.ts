import type { ServiceContext } from '@anvil/observability';
import { startNestService } from '@anvil/service-kit';
import { RolloutManagerModule } from './app.module';
import type { RolloutManagerConfig } from './config';

export const start = (ctx: ServiceContext<RolloutManagerConfig>) => startNestService(ctx, RolloutManagerModule.forRoot(ctx));
