import { Module, type DynamicModule } from '@nestjs/common';
import type { ServiceContext } from '@anvil/observability';
import { serviceCoreModules } from '@anvil/service-kit';
import type { InferenceProxyConfig } from './config';

/** The inference-proxy service: inference backends, routing and weight versions (backends arrive with the gateway/inference issue). */
@Module({})
export class InferenceProxyModule {
  static forRoot(ctx: ServiceContext<InferenceProxyConfig>): DynamicModule {
    return { module: InferenceProxyModule, imports: [...serviceCoreModules(ctx)] };
  }
}
