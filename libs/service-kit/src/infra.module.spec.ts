import { describe, expect, it } from 'vitest';
import { Module, type DynamicModule } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { z } from 'zod';
import { loadConfig, port, serviceBaseEnv } from '@anvil/config';
import { createLogger, ServiceMetrics, startTelemetry } from '@anvil/observability';
import { waitFor } from '@anvil/testing';
import type { MessageBus } from '@anvil/messaging';
import { createSharedInfra, hostedServiceContext, startHostedService } from './embedded-host';
import { serviceCoreModules } from './service-modules';
import { DATA_SOURCE, EVENT_BUS } from './tokens';

const env = z.object({ ...serviceBaseEnv, PORT: port(0), HOST: z.string().default('127.0.0.1') });

@Module({})
class ProbeModule {}
const root = (ctx: Parameters<typeof serviceCoreModules>[0]): DynamicModule => ({ module: ProbeModule, imports: serviceCoreModules(ctx) });

describe('InfraModule by configuration', () => {
  it('EVENT_BUS_KIND=memory and DATABASE_URL=memory: its own in-process bus and PGlite, no Kafka setting needed, closed with the app', async () => {
    // What a standalone service's main.ts builds (launchService), with no shared infra.
    const config = loadConfig('probe', env, { EVENT_BUS_KIND: 'memory', DATABASE_URL: 'memory', LOG_LEVEL: 'error' });
    expect(config.KAFKA_BROKERS).toEqual([]);
    const ctx = {
      service: 'probe',
      config,
      telemetry: startTelemetry({ serviceName: 'probe' }),
      logger: createLogger({ service: 'probe', level: 'error' }),
      metrics: new ServiceMetrics('probe'),
    };
    const svc = await startHostedService(ctx, root(ctx));
    const bus = svc.app.get<MessageBus>(EVENT_BUS);
    const ds = svc.app.get<DataSource>(DATA_SOURCE);
    expect(bus.kind).toBe('memory');
    // The database connects lazily (PGlite compiles first): ready once it answers.
    const body = await waitFor(
      '/readyz 200',
      async () => {
        const res = await fetch(`${svc.url}/readyz`);
        return res.status === 200 ? ((await res.json()) as { ready: boolean; checks: Record<string, { ok: boolean }> }) : undefined;
      },
      100_000,
      100,
    );
    expect(Object.keys(body.checks).sort()).toEqual(['database', 'event-bus']);
    expect(ds.isInitialized).toBe(true);
    await svc.close();
    expect(ds.isInitialized).toBe(false);
    expect((await bus.health()).detail).toMatchObject({ closed: true });
  }, 120_000);

  it('shared instances are used as they are and left open for the host to close', async () => {
    const infra = await createSharedInfra();
    const ctx = hostedServiceContext('probe', env, { LOG_LEVEL: 'error' }, infra);
    expect(ctx.config.EVENT_BUS_KIND).toBe('memory');
    const a = await startHostedService(ctx, root(ctx));
    const ctx2 = hostedServiceContext('probe-2', env, { LOG_LEVEL: 'error' }, infra);
    const b = await startHostedService(ctx2, root(ctx2));
    expect(a.app.get(EVENT_BUS)).toBe(infra.bus);
    expect(b.app.get(EVENT_BUS)).toBe(infra.bus);
    expect(b.app.get(DATA_SOURCE)).toBe(infra.dataSource);
    await a.close();
    await b.close();
    expect(infra.dataSource.isInitialized).toBe(true);
    expect(await infra.dataSource.query('SELECT 1 AS "one"')).toEqual([{ one: 1 }]);
    await infra.close();
    expect(infra.dataSource.isInitialized).toBe(false);
  }, 120_000);
});
