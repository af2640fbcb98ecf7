import type { ServiceContext } from '@anvil/observability';
import { startNestService } from '@anvil/service-kit';
import { MiddlewareModule } from './app.module';
import type { MiddlewareConfig } from './config';

export const start = (ctx: ServiceContext<MiddlewareConfig>) => startNestService(ctx, MiddlewareModule.forRoot(ctx));
