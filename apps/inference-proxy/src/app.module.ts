import { Module, type DynamicModule } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import type { ServiceContext } from '@anvil/observability';
import { ERROR_FILTER_OPTIONS, OpenAiErrorFilter, serviceCoreModules } from '@anvil/service-kit';
import type { InferenceProxyConfig } from './config';
import { GenerateController } from './http/generate.controller';
import { proxyApiError } from './http/http-errors';
import { RuntimeLifecycle, runtimeProvider } from './runtime.provider';
import { INFERENCE_CONFIG } from './tokens';
import { WeightsConsumer } from './weights/weights.consumer';

/**
 * The inference-proxy service: inference backends (embedded engine, vLLM, SGLang), session-
 * affine routing with fail-over, and policy versions swapped on weights.published.
 */
@Module({})
export class InferenceProxyModule {
  static forRoot(ctx: ServiceContext<InferenceProxyConfig>): DynamicModule {
    return {
      module: InferenceProxyModule,
      imports: [...serviceCoreModules(ctx)],
      controllers: [GenerateController],
      providers: [
        { provide: INFERENCE_CONFIG, useValue: ctx.config },
        { provide: ERROR_FILTER_OPTIONS, useValue: { domain: proxyApiError } },
        { provide: APP_FILTER, useClass: OpenAiErrorFilter },
        runtimeProvider,
        RuntimeLifecycle,
        WeightsConsumer,
      ],
    };
  }
}
