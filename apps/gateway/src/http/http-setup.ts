import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { FastifyInstance } from 'fastify';
import type { GatewayConfig } from '../config';
import type { GatewayMetrics } from '../metrics';
import { GATEWAY_CONFIG, GATEWAY_METRICS } from '../tokens';
import { installJsonBodyParser } from './json-body';

/**
 * Fastify-level setup that must happen before the server listens: the strict JSON parser with
 * the body limit, and request metrics by route pattern and status (the pattern, never the URL:
 * a per-session URL carries the session's secret).
 */
@Injectable()
export class HttpSetup implements OnModuleInit {
  constructor(
    @Inject(HttpAdapterHost) private readonly adapterHost: HttpAdapterHost,
    @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
    @Inject(GATEWAY_METRICS) private readonly metrics: GatewayMetrics,
  ) {}

  onModuleInit(): void {
    const fastify = this.adapterHost.httpAdapter?.getInstance<FastifyInstance>();
    if (!fastify) return;
    installJsonBodyParser(fastify, this.config.MAX_REQUEST_BYTES);
    fastify.addHook('onRequest', (req, reply, done) => {
      // 'finish' fires for hijacked (SSE) answers too, which onResponse hooks do not see.
      reply.raw.once('finish', () => {
        const route = req.routeOptions?.url ?? 'unmatched';
        this.metrics.requests.inc({ route, status: String(reply.raw.statusCode) });
      });
      done();
    });
  }
}
