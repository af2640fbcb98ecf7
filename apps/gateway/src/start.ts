import type { ServiceContext } from '@anvil/observability';
import { startNestService } from '@anvil/service-kit';
import { GatewayModule } from './app.module';
import type { GatewayConfig } from './config';

export const start = (ctx: ServiceContext<GatewayConfig>) => startNestService(ctx, GatewayModule.forRoot(ctx));
