import type { ServiceContext } from '@anvil/observability';
import { startNestService } from '@anvil/service-kit';
import { TrainerModule } from './app.module';
import type { TrainerConfig } from './config';

export const start = (ctx: ServiceContext<TrainerConfig>) => startNestService(ctx, TrainerModule.forRoot(ctx));
