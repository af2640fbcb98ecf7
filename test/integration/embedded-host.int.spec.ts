import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOPICS, type AnyEventEnvelope } from '@anvil/contracts';
import { LlmCall, ProcessedEvent } from '@anvil/persistence';
import { createSharedInfra, hostedServiceContext, startHostedService, type HostedService, type SharedInfra } from '@anvil/service-kit';
import { waitFor } from '@anvil/testing';
import { GatewayModule, gatewayEnv } from '@anvil/gateway';
import { InferenceProxyModule, inferenceProxyEnv } from '@anvil/inference-proxy';
import { MiddlewareModule, middlewareEnv } from '@anvil/middleware';

/**
 * The one-process deployment: gateway, inference-proxy (embedded engine, built-in tiny
 * model) and middleware (the Data Pool) as Nest modules in THIS process, on one in-process
 * bus and one PGlite database built once by createSharedInfra. No Kafka, no PostgreSQL
 * server. A chat call through the gateway is answered by the engine, and its
 * llm_call.recorded reaches the Data Pool's llm_calls table through the shared bus.
 */
const ADMIN_TOKEN = 'embedded-host-admin-token-0123456789abcdef';
let infra: SharedInfra;
const services: HostedService[] = [];
let gateway: HostedService;
const recorded: AnyEventEnvelope[] = [];

beforeAll(async () => {
  infra = await createSharedInfra();
  // A bystander on the same bus: what the gateway publishes is what the Data Pool consumes.
  await infra.bus.subscribe({
    group: 'host-test',
    topics: [TOPICS.llmCalls],
    fromBeginning: true,
    handler: async (e) => void recorded.push(e),
  });

  const proxyCtx = hostedServiceContext(
    'inference-proxy',
    inferenceProxyEnv,
    { PORT: '0', LOG_LEVEL: 'error', INFERENCE_BACKEND: 'embedded' },
    infra,
  );
  const proxy = await startHostedService(proxyCtx, InferenceProxyModule.forRoot(proxyCtx));
  services.push(proxy);

  const poolCtx = hostedServiceContext('middleware', middlewareEnv, { PORT: '0', LOG_LEVEL: 'error' }, infra);
  services.push(await startHostedService(poolCtx, MiddlewareModule.forRoot(poolCtx)));

  const gatewayCtx = hostedServiceContext(
    'gateway',
    gatewayEnv,
    { PORT: '0', LOG_LEVEL: 'error', GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN, INFERENCE_PROXY_URL: proxy.url },
    infra,
  );
  gateway = await startHostedService(gatewayCtx, GatewayModule.forRoot(gatewayCtx), {
    bodyLimitBytes: gatewayCtx.config.MAX_REQUEST_BYTES,
  });
  services.push(gateway);

  for (const s of services) {
    await waitFor(`${s.service} /readyz`, async () => ((await fetch(`${s.url}/readyz`)).status === 200 ? true : undefined), 120_000, 100);
  }
}, 240_000);

afterAll(async () => {
  for (const s of services.reverse()) await s.close().catch(() => undefined);
  await infra?.close();
});

describe('one process: gateway + inference-proxy (embedded) + middleware on the in-process bus and PGlite', () => {
  it('shares one bus and one database, and reports them as such', async () => {
    expect(infra.bus.kind).toBe('memory');
    expect(infra.dataSource.isInitialized).toBe(true);
    for (const s of services) {
      const ready = (await (await fetch(`${s.url}/readyz`)).json()) as { checks: Record<string, { ok: boolean }> };
      expect(ready.checks['event-bus']?.ok, s.service).toBe(true);
      expect(ready.checks.database?.ok, s.service).toBe(true);
      expect(ready.checks.kafka, s.service).toBeUndefined();
    }
  });

  it('records a call end to end: answered by the engine, its llm_call.recorded lands in the Data Pool tables', async () => {
    const admin = await fetch(`${gateway.url}/admin/v1/sessions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ rolloutId: 'host-rollout-1', groupId: 'host-group-1', taskId: 'host-task-1', model: 'anvil-tiny' }),
    });
    expect(admin.status, await admin.clone().text()).toBe(201);
    const session = (await admin.json()) as { sessionId: string; apiKey: string };

    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${session.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'anvil-tiny', messages: [{ role: 'user', content: 'Add 12 and 7.' }], max_tokens: 8, temperature: 0 }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = (await res.json()) as { id: string; choices: { message: { role: string } }[]; usage: { completion_tokens: number } };
    expect(body.choices[0].message.role).toBe('assistant');
    expect(body.usage.completion_tokens).toBeGreaterThan(0);

    const row = await waitFor(
      'the call in llm_calls',
      async () => (await infra.dataSource.manager.findOneBy(LlmCall, { rolloutId: 'host-rollout-1' })) ?? undefined,
      60_000,
      50,
    );
    expect(row.sessionId).toBe(session.sessionId);
    expect(row.groupId).toBe('host-group-1');
    expect(row.outputTokens).toBe(body.usage.completion_tokens);
    expect(row.outputIds.length).toBe(body.usage.completion_tokens);
    // The Data Pool consumed the very event the gateway published on the shared bus, once.
    const events = recorded.filter((e) => e.type === 'llm_call.recorded' && e.payload.rolloutId === 'host-rollout-1');
    expect(events).toHaveLength(1);
    expect(row.eventId).toBe(events[0].id);
    expect(await infra.dataSource.manager.countBy(ProcessedEvent, { eventId: events[0].id })).toBe(1);
  });
});
