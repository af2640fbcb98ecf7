import { Module, type DynamicModule } from '@nestjs/common';
import type { ServiceContext } from '@anvil/observability';
import { serviceCoreModules } from '@anvil/service-kit';
import type { GatewayConfig } from './config';

/** The gateway service: the agent-facing OpenAI-compatible API, session auth, token-exact capture and back-pressure (the chat endpoints arrive with the gateway issue). */
@Module({})
export class GatewayModule {
  static forRoot(ctx: ServiceContext<GatewayConfig>): DynamicModule {
    return { module: GatewayModule, imports: [...serviceCoreModules(ctx)] };
  }
}
