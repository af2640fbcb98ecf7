import { Controller, Get, Header, HttpCode, Inject, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { ServiceMetrics } from '@anvil/observability';
import { ReadinessRegistry } from './readiness';
import { METRICS, SERVICE_NAME } from './tokens';

/** /healthz (the process is alive), /readyz (its dependencies answer), /metrics (Prometheus). */
@Controller()
export class OpsController {
  constructor(
    @Inject(SERVICE_NAME) private readonly service: string,
    @Inject(ReadinessRegistry) private readonly readiness: ReadinessRegistry,
    @Inject(METRICS) private readonly metrics: ServiceMetrics,
  ) {}

  @Get('healthz')
  @HttpCode(200)
  healthz() {
    return { status: 'ok', service: this.service, uptimeSeconds: Math.round(process.uptime()) };
  }

  @Get('readyz')
  async readyz(@Res() reply: FastifyReply) {
    const report = await this.readiness.evaluate();
    await reply.status(report.ready ? 200 : 503).send({ status: report.ready ? 'ready' : 'not_ready', service: this.service, ...report });
  }

  @Get('metrics')
  @Header('Cache-Control', 'no-store')
  async metricsText(@Res() reply: FastifyReply) {
    const { contentType, body } = await this.metrics.render();
    await reply.header('Content-Type', contentType).send(body);
  }
}
