import type { ServiceContext } from '@anvil/observability';
import { bootstrapService } from '@anvil/service-kit';
import { GatewayModule } from './app.module';
import type { GatewayConfig } from './config';

export const start = (ctx: ServiceContext<GatewayConfig>) =>
  bootstrapService({
    service: ctx.service,
    rootModule: GatewayModule.forRoot(ctx),
    logger: ctx.logger,
    telemetry: ctx.telemetry,
    port: ctx.config.PORT,
    host: ctx.config.HOST,
    shutdownTimeoutMs: ctx.config.SHUTDOWN_TIMEOUT_MS,
    // Oversized bodies are refused (413) before they are read in full.
    bodyLimitBytes: ctx.config.MAX_REQUEST_BYTES,
  });
