import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBuilt, startService, waitFor, type ServiceProcess } from '@anvil/testing';

/**
 * Each built service boots as its own process against the real Kafka broker and PostgreSQL
 * server, reports ready, serves metrics, and stops cleanly on SIGTERM; bad configuration
 * makes it exit non-zero listing every problem.
 */
const KAFKA_BROKERS = process.env.KAFKA_BROKERS;
const DATABASE_URL = process.env.DATABASE_URL;
if (!KAFKA_BROKERS || !DATABASE_URL) throw new Error('KAFKA_BROKERS and DATABASE_URL must be set (npm test starts the stack)');

const adminToken = 'e2e-admin-token-0123456789abcdef0123456789';
const common = { KAFKA_BROKERS, DATABASE_URL, LOG_LEVEL: 'info', KAFKA_TOPIC_PREFIX: `e2e-${process.pid}.` };
const envs: Record<string, NodeJS.ProcessEnv> = {
  gateway: { ...common, GATEWAY_ADMIN_TOKEN: adminToken, INFERENCE_PROXY_URL: 'http://127.0.0.1:9' },
  'inference-proxy': { ...common },
  'rollout-manager': { ...common, GATEWAY_URL: 'http://127.0.0.1:9', GATEWAY_ADMIN_TOKEN: adminToken },
  middleware: { ...common },
  trainer: { ...common, CHECKPOINT_DIR: '/tmp/anvil-e2e-checkpoints' },
};

const running: ServiceProcess[] = [];
// The gateway is ready only while its inference-proxy answers: one (embedded engine) runs for it.
beforeAll(async () => {
  const proxy = await startService('inference-proxy', { ...common, DEPLOYMENT_NAME: 'e2e-boot-gateway-proxy' }, 120_000);
  running.push(proxy);
  envs.gateway.INFERENCE_PROXY_URL = proxy.baseUrl;
});
afterAll(async () => {
  await Promise.all(running.map((s) => s.stop('SIGKILL')));
});

describe.each(Object.keys(envs))('%s as a process', (app) => {
  it('becomes ready with Kafka and PostgreSQL, serves metrics, and stops cleanly on SIGTERM', async () => {
    const svc = await startService(app, envs[app]);
    running.push(svc);
    const health = await fetch(`${svc.baseUrl}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: 'ok', service: app });

    const ready = await waitFor(
      '/readyz 200',
      async () => {
        const res = await fetch(`${svc.baseUrl}/readyz`);
        return res.status === 200 ? res.json() : undefined;
      },
      60_000,
    );
    expect(ready).toMatchObject({ status: 'ready', checks: { kafka: { ok: true }, postgres: { ok: true } } });

    const metrics = await (await fetch(`${svc.baseUrl}/metrics`)).text();
    expect(metrics).toContain(`service="${app}"`);
    expect(metrics).toContain('anvil_process_');

    expect(await svc.stop('SIGTERM')).toBe(0);
    expect(svc.output()).toContain('stopped cleanly');
  });
});

describe('readiness and configuration failures', () => {
  it('reports not ready (503) while Kafka is unreachable, naming the failed check', async () => {
    const svc = await startService('trainer', { ...envs.trainer, KAFKA_BROKERS: '127.0.0.1:1' });
    running.push(svc);
    const res = await fetch(`${svc.baseUrl}/readyz`);
    expect(res.status).toBe(503);
    const body = (await res.json()) as { checks: Record<string, { ok: boolean }> };
    expect(body.checks.kafka.ok).toBe(false);
    expect(body.checks.postgres.ok).toBe(true);
    expect(await svc.stop('SIGTERM')).toBe(0);
  });

  it("the gateway reports not ready (503) while its inference-proxy is unreachable, without the proxy's address", async () => {
    const svc = await startService('gateway', { ...envs.gateway, INFERENCE_PROXY_URL: 'http://127.0.0.1:9' });
    running.push(svc);
    const res = await fetch(`${svc.baseUrl}/readyz`);
    expect(res.status).toBe(503);
    const body = (await res.json()) as { checks: Record<string, { ok: boolean; error?: string }> };
    expect(body.checks['inference-proxy']).toMatchObject({ ok: false, error: 'the inference-proxy is unreachable' });
    expect(body.checks.postgres.ok).toBe(true);
    expect(await svc.stop('SIGTERM')).toBe(0);
  });

  it('exits 78 listing every configuration problem at once, echoing no secret', async () => {
    const { exited, output } = runBuilt('gateway', {
      KAFKA_BROKERS: 'not a broker',
      DATABASE_URL: 'mysql://x',
      GATEWAY_ADMIN_TOKEN: 'short-secret',
      PORT: 'eighty',
    });
    expect(await exited).toBe(78);
    const text = output();
    for (const name of ['KAFKA_BROKERS', 'DATABASE_URL', 'GATEWAY_ADMIN_TOKEN', 'INFERENCE_PROXY_URL', 'PORT'])
      expect(text).toContain(name);
    expect(text).not.toContain('short-secret');
  });
});
