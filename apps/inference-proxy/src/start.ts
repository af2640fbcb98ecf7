import type { ServiceContext } from '@anvil/observability';
import { startNestService } from '@anvil/service-kit';
import { InferenceProxyModule } from './app.module';
import type { InferenceProxyConfig } from './config';

export const start = (ctx: ServiceContext<InferenceProxyConfig>) => startNestService(ctx, InferenceProxyModule.forRoot(ctx));
