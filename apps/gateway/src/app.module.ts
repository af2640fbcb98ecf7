import { Module, type DynamicModule } from '@nestjs/common';
import type { ServiceContext } from '@anvil/observability';
import { serviceCoreModules } from '@anvil/service-kit';
import type { GatewayConfig } from './config';
import { GatewayApiModule } from './gateway-api.module';

/** The gateway service: the agent-facing OpenAI-compatible API, session auth, token-exact capture and back-pressure. */
@Module({})
export class GatewayModule {
  static forRoot(ctx: ServiceContext<GatewayConfig>): DynamicModule {
    return { module: GatewayModule, imports: [...serviceCoreModules(ctx), GatewayApiModule.forRoot(ctx.config)] };
  }
}
